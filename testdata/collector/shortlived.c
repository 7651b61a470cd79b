/* shortlived: spins for 100 ms of its CPU time and exits. Before spinning
 * it prints the runtime address of work() and the CLOCK_MONOTONIC time in
 * ns, so a test can make a sample that the collector must attribute to
 * this binary after the process is gone. CPU time, not the wall clock's:
 * a loaded host gives the process a fraction of a CPU, and a test expects
 * the samples of 100 ms of running. The clock is read every 100,000
 * additions (about 0.1 ms): reading the CPU-time clock is a system call.
 */
#include <stdio.h>
#include <time.h>

static volatile unsigned long sink;

static unsigned long long clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void work(unsigned long long ns)
{
	unsigned long long start = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	do {
		for (int i = 0; i < 100000; i++)
			sink += i;
	} while (clock_ns(CLOCK_PROCESS_CPUTIME_ID) - start < ns);
}

int main(void)
{
	printf("%p %llu\n", (void *)work, clock_ns(CLOCK_MONOTONIC));
	fflush(stdout);
	work(100000000ULL);
	return 0;
}
