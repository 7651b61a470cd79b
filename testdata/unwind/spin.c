/* A fixture for sprof's unwinding accuracy tests: it spins forever in
 * compare, which libc's qsort calls, so every sample's stack is
 * compare -> (libc qsort internals) -> run -> main. Built -O2
 * -fomit-frame-pointer, with and without .sframe, by
 * scripts/unwind-fixtures.sh. */
#include <stdlib.h>

#define N 64

static volatile unsigned sink;

__attribute__((noinline)) static int compare(const void *a, const void *b)
{
	/* Spin here, where the whole chain is deepest. */
	for (unsigned i = 0; i < 2000; i++)
		sink += i;
	return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) static void run(int *v)
{
	for (;;) {
		for (int i = 0; i < N; i++)
			v[i] = (i * 7919) % N;
		qsort(v, N, sizeof v[0], compare);
	}
}

int main(void)
{
	int v[N];
	run(v);
	return 0;
}
