/* spin: burns CPU in main -> a -> b -> c for the number of seconds given as
 * its first argument (default 2), so a profiler should see that one chain.
 * Built by scripts/e2e-fixtures.sh. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long c(double end)
{
	unsigned long n = 0;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i ^ n++;
	return n;
}

__attribute__((noinline)) unsigned long b(double end) { return c(end) + 1; }
__attribute__((noinline)) unsigned long a(double end) { return b(end) + 1; }

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	return a(now() + secs) == 0;
}
