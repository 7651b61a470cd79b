/*
 * Fixture for sprof's BPF stack copy (x86-64, aarch64): code without frame pointers,
 * built -O2 -fomit-frame-pointer -no-pie by scripts/build-bpf-fixtures.sh.
 * Each mode spins forever in c; the test samples it and looks for the
 * return addresses and canaries, read from this binary and this source, in
 * the copied stack.
 *
 *   chain    main -> a -> b -> c on the main thread; b keeps a 3 KiB
 *            array on its stack that starts with CANARY_LOW and ends with
 *            CANARY_HIGH
 *   thread   the same chain in a second thread, on a pthread stack
 *   deep     main -> recurse x 32 -> c, each recurse frame 1 KiB: a stack
 *            deeper than the largest copies benchmarked
 *   fault    spins with its stack pointer FAULT_SP bytes into a 64 KiB
 *            anonymous mapping of which only the first FAULT_TOUCHED bytes
 *            were ever written (with byte i = i * 7): the pages above are
 *            not resident, and a copy that reaches them faults
 *   hole     the same, but the mapping's last HOLE_TOP bytes were written
 *            too: the unwritten pages are a hole in the stack
 *   merged   the chain of thread on a thread stack given by
 *            pthread_attr_setstack at the bottom of a mapping MERGED_GAP
 *            bytes larger, never written above the stack: the layout of
 *            glibc's thread stacks on Linux 6.1, which merges their mapping
 *            with an anonymous mapping above it
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define CANARY_LOW 0x5350524f46434c4fUL  /* "OLCFORPS" */
#define CANARY_HIGH 0x5350524f46434849UL /* "IHCFORPS" */

volatile unsigned long sink;
volatile int stop;

#define NOINLINE __attribute__((noinline, noclone))
/* Code after each call keeps -O2 from turning it into a tail jump. */
#define KEEP() __asm__ volatile("" ::: "memory")

NOINLINE void c(void) { while (!stop) sink++; }

NOINLINE void b(void)
{
	volatile unsigned long frame[384];

	frame[0] = CANARY_LOW;
	frame[383] = CANARY_HIGH;
	c();
	sink += frame[1];
}

NOINLINE void a(void) { b(); KEEP(); }

NOINLINE void recurse(int n)
{
	volatile unsigned long frame[128];

	frame[0] = n;
	if (n > 0)
		recurse(n - 1);
	else
		c();
	sink += frame[0];
}

#define FAULT_MAP (64 << 10)
#define FAULT_TOUCHED (12 << 10)
#define FAULT_SP 64

NOINLINE void spin_on_stack(void *sp)
{
#if defined(__x86_64__)
	__asm__ volatile("mov %0,%%rsp\n\txor %%ebp,%%ebp\n1: jmp 1b" ::"r"(sp));
#elif defined(__aarch64__)
	__asm__ volatile("mov sp, %0\n\tmov x29, xzr\n1: b 1b" ::"r"(sp));
#else
#error "nofp: x86-64 or aarch64 only"
#endif
}

#define HOLE_TOP (48 << 10)

static int fault(int hole)
{
	unsigned char *p = mmap(NULL, FAULT_MAP, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED || madvise(p, FAULT_MAP, MADV_NOHUGEPAGE))
		return 1;
	for (int i = 0; i < FAULT_TOUCHED; i++)
		p[i] = (unsigned char)(i * 7);
	if (hole)
		memset(p + FAULT_MAP - HOLE_TOP, 1, HOLE_TOP);
	spin_on_stack(p + FAULT_SP);
	return 0;
}

static void *thread(void *arg);

#define MERGED_STACK (8 << 20)
#define MERGED_GAP (12 << 10)

static int merged(void)
{
	void *p = mmap(NULL, MERGED_STACK + MERGED_GAP, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	pthread_attr_t attr;
	pthread_t t;

	/* No huge page: one backing the stack's top would make the gap above
	 * it resident, and the stack would not end there (a copy in the
	 * kernel matrix's arm64 6.1 VM read 16 KiB on into it). */
	if (p == MAP_FAILED || madvise(p, MERGED_STACK + MERGED_GAP, MADV_NOHUGEPAGE) || pthread_attr_init(&attr) ||
	    pthread_attr_setstack(&attr, p, MERGED_STACK) || pthread_create(&t, &attr, thread, NULL))
		return 1;
	return pthread_join(t, NULL);
}

static void *thread(void *arg)
{
	a();
	return arg;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "chain";
	pthread_t t;

	if (!strcmp(mode, "chain"))
		a();
	else if (!strcmp(mode, "thread")) {
		if (pthread_create(&t, NULL, thread, NULL))
			return 1;
		pthread_join(t, NULL);
	} else if (!strcmp(mode, "deep"))
		recurse(32);
	else if (!strcmp(mode, "fault") || !strcmp(mode, "hole"))
		return fault(!strcmp(mode, "hole"));
	else if (!strcmp(mode, "merged"))
		return merged();
	else {
		fprintf(stderr, "usage: nofp chain|thread|deep|fault|hole|merged\n");
		return 2;
	}
	KEEP();
	return 0;
}
