/* inlspin: burns CPU for the seconds given as its first argument (default
 * 2) in spin, into which step and mix are inlined at -O2, so a profile
 * symbolized from its DWARF has inline frames with files and lines. Built
 * by scripts/agent-fixtures.sh. */
#include <stdlib.h>
#include <time.h>

static volatile unsigned sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline unsigned mix(unsigned h, unsigned v)
{
	h ^= v;
	h *= 0x01000193u;
	return h ^ (h >> 13);
}

static inline unsigned step(unsigned h, unsigned i)
{
	return mix(mix(h, i), i >> 3);
}

__attribute__((noinline)) unsigned spin(double end)
{
	unsigned h = 2166136261u;
	while (now() < end)
		for (unsigned i = 0; i < 1000000; i++)
			h = step(h, i);
	return h;
}

int main(int argc, char **argv)
{
	sink = spin(now() + (argc > 1 ? atof(argv[1]) : 2));
	return 0;
}
