/* Fixture for symbolize/: functions of every shape a symbolizer meets in
 * C at -O2 — global, static, inlined, cold-split, cloned, recursive, and
 * hand-written assembly without sizes. Built by
 * scripts/symbolize-fixtures.sh. */
#include <stdio.h>
#include <stdlib.h>

volatile int sink;

/* Twenty small global functions, each kept out of line. */
#define LEAF(n)                                                                \
	__attribute__((noinline)) int leaf##n(int x)                           \
	{                                                                      \
		for (int i = 0; i < (x & 7) + n; i++)                          \
			sink += i * n;                                         \
		return sink ^ n;                                               \
	}
LEAF(0) LEAF(1) LEAF(2) LEAF(3) LEAF(4) LEAF(5) LEAF(6) LEAF(7) LEAF(8)
LEAF(9) LEAF(10) LEAF(11) LEAF(12) LEAF(13) LEAF(14) LEAF(15) LEAF(16)
LEAF(17) LEAF(18) LEAF(19)

/* Inlined into its callers: its code shows up inside them. */
static inline int mix(int a, int b)
{
	int r = a;
	for (int i = 0; i < b; i++)
		r = r * 31 + leaf3(i);
	return r;
}

static __attribute__((noinline)) int helper(int x)
{
	return mix(x, x & 3) + leaf1(x);
}

/* The unlikely branch goes to helper_err.cold. */
__attribute__((noinline)) int checked(int x)
{
	if (__builtin_expect(x == 12345, 0)) {
		fprintf(stderr, "unlikely %d\n", x);
		abort();
	}
	return helper(x) + mix(x, 2);
}

/* Called only with a constant: gcc clones it (scaled.constprop.0). */
static __attribute__((noinline)) int scaled(int x, int k)
{
	int r = 0;
	for (int i = 0; i < x; i++)
		r += leaf2(i) * k;
	return r;
}

__attribute__((noinline)) int recurse(int n)
{
	if (n <= 0)
		return leaf0(n);
	return recurse(n - 1) + n;
}

/* A function without .size and a label without a type, as hand-written
 * assembly often has. */
__asm__(".text\n"
	".globl asm_nosize\n"
	".type asm_nosize, @function\n"
	"asm_nosize:\n"
	"\tnop\n\tnop\n\tnop\n"
	".globl asm_label\n"
	"asm_label:\n"
	"\tnop\n\tret\n");
void asm_nosize(void);

int main(int argc, char **argv)
{
	int (*table[])(int) = {leaf4,  leaf5,  leaf6,  leaf7,  leaf8,
			       leaf9,  leaf10, leaf11, leaf12, leaf13,
			       leaf14, leaf15, leaf16, leaf17, leaf18,
			       leaf19};
	int n = argc > 1 ? atoi(argv[1]) : 3;
	int r = 0;
	for (int i = 0; i < 16; i++)
		r += table[i](n + i);
	r += checked(n) + scaled(n, 7) + recurse(n) + mix(r, n);
	asm_nosize();
	printf("%d\n", r);
	return 0;
}
