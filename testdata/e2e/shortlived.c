/* shortlived: spins in shortlived_work for 100 ms of its CPU time, then
 * exits: a profiler must still attribute and symbolize its samples. CPU
 * time, not the wall clock's: a loaded host gives the process a fraction
 * of a CPU, and a test expects the samples of 100 ms of running. The clock
 * is read every 100,000 additions (about 0.1 ms): reading the CPU-time
 * clock is a system call. */
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void shortlived_work(double ms)
{
	struct timespec start, ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
	do {
		for (int i = 0; i < 100000; i++)
			sink += i;
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	} while ((ts.tv_sec - start.tv_sec) * 1e3 + (ts.tv_nsec - start.tv_nsec) / 1e6 < ms);
}

int main(void)
{
	shortlived_work(100);
	return 0;
}
