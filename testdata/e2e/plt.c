/* plt: burns CPU in main -> a -> b -> c for the number of seconds given as
 * its first argument (default 2), where c calls libc's labs through the PLT
 * in a tight loop: many samples land in the PLT stub or in labs, frameless
 * leaves whose caller c is known only from the return address (on aarch64,
 * in the link register). A profiler should still see c <- b <- a <- main.
 * Built by scripts/e2e-fixtures.sh with -fno-builtin, so labs is a call. */
#include <stdlib.h>
#include <time.h>

static volatile long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) long c(double end)
{
	long n = 0;
	while (now() < end)
		for (int i = 0; i < 100000; i++, n++)
			sink += labs(i - 50000);
	return n;
}

__attribute__((noinline)) long b(double end) { return c(end) + 1; }
__attribute__((noinline)) long a(double end) { return b(end) + 1; }

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	return a(now() + secs) == 0;
}
