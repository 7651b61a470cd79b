/*
 * Fixture for the BPF walk over unwind tables (x86-64, aarch64): a
 * recursion without frame pointers, built -O2 -fomit-frame-pointer
 * -no-pie by scripts/build-bpf-fixtures.sh. main calls recurse with the
 * depth given as the argument (400 by default); each recurse frame holds
 * a 240-byte array, about 256 bytes a frame, and the innermost calls spin,
 * which never returns. So every sample of the main thread is
 * spin <- recurse x depth <- main <- libc's start code <- _start.
 */
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;

NOINLINE static void spin(void)
{
	for (;;)
		sink++;
}

NOINLINE static void recurse(int n)
{
	volatile char frame[240];

	frame[0] = (char)n;
	if (n > 1)
		recurse(n - 1);
	else
		spin();
	/* Work after the call keeps it from becoming a tail jump. */
	sink += frame[0] + frame[239];
}

int main(int argc, char **argv)
{
	recurse(argc > 1 ? atoi(argv[1]) : 400);
	return 0;
}
