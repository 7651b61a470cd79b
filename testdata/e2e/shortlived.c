/* shortlived: lives about 100 ms, spinning in shortlived_work, then exits:
 * a profiler must still attribute and symbolize its samples. */
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void shortlived_work(double ms)
{
	struct timespec start, ts;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (int i = 0; i < 10000; i++)
			sink += i;
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while ((ts.tv_sec - start.tv_sec) * 1e3 + (ts.tv_nsec - start.tv_nsec) / 1e6 < ms);
}

int main(void)
{
	shortlived_work(100);
	return 0;
}
