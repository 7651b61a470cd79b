/* shortlived: lives about 100 ms and exits. Before spinning it prints the
 * runtime address of work() and the CLOCK_MONOTONIC time in ns, so a test
 * can make a sample that the collector must attribute to this binary after
 * the process is gone. */
#include <stdio.h>
#include <time.h>

static volatile unsigned long sink;

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void work(unsigned long long ns)
{
	unsigned long long start = now_ns();
	do {
		for (int i = 0; i < 10000; i++)
			sink += i;
	} while (now_ns() - start < ns);
}

int main(void)
{
	printf("%p %llu\n", (void *)work, now_ns());
	fflush(stdout);
	work(100000000ULL);
	return 0;
}
