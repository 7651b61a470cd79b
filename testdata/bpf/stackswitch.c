/*
 * Fixture for sprof's BPF walk across two stacks in one mapping, x86-64
 * and aarch64. Built -O2 -fno-omit-frame-pointer -no-pie by
 * scripts/build-bpf-fixtures.sh.
 *
 * The layout of Go's systemstack on a thread Go started: the thread's g0
 * stack and its goroutine's stack lie in one heap-arena mapping, and code
 * on g0 links its frame records back to the goroutine's, which can lie
 * below. Here main runs goroutine on the lower half of one anonymous
 * mapping (run_on_stack), and goroutine runs spin on the upper half; spin
 * calls tick in a loop. The chain from spin goes up the upper half, down
 * to the lower half, and from there to main's stack, another mapping.
 *
 * With the argument "above", the layout of Go's goroutines taking turns on
 * one thread: main runs wait_to_move on a stack in the second page of a
 * mapping whose pages above it are untouched (a stack copy of it ends at
 * the third page's start, where reading faults) until SIGUSR1, then
 * far_spin on a stack at the mapping's top, whose frame reaches down
 * below the second page's end: spin's frame record lies below that first
 * stack's top, and far_spin's far above it.
 */
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#define NOINLINE __attribute__((noinline, noclone))
/* Code after each call keeps -O2 from turning it into a tail jump. */
#define KEEP() __asm__ volatile("" ::: "memory")

volatile unsigned long sink;

/* run_on_stack(top, fn) calls fn with the stack pointer at top, its own
 * frame record on the caller's stack, as Go's systemstack does. */
void run_on_stack(char *top, void (*fn)(void));
#if defined(__x86_64__)
__asm__(".text\n.globl run_on_stack\n.type run_on_stack,@function\nrun_on_stack:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n\tmov %rdi,%rsp\n\tcall *%rsi\n"
	"\tmov %rbp,%rsp\n\tpop %rbp\n\tret\n"
	".size run_on_stack, .-run_on_stack\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl run_on_stack\n.type run_on_stack,%function\nrun_on_stack:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n\tmov sp, x0\n\tblr x1\n"
	"\tmov sp, x29\n\tldp x29, x30, [sp], #16\n\tret\n"
	".size run_on_stack, .-run_on_stack\n");
#else
#error "x86-64 and aarch64 only"
#endif

#define HALF (64 << 10)

static char *mapping;

NOINLINE void tick(void) { sink++; }

NOINLINE void spin(void)
{
	for (;;)
		tick();
}

NOINLINE void goroutine(void)
{
	run_on_stack(mapping + 2 * HALF - 64, spin);
	KEEP();
}

#define PAGE 4096
#define ABOVE_PAGES 32

static volatile sig_atomic_t moved;

static void move(int sig) { moved = 1; }

NOINLINE void wait_to_move(void)
{
	while (!moved)
		tick();
}

NOINLINE void far_spin(void)
{
	volatile char pad[(ABOVE_PAGES - 2) * PAGE];

	pad[0] = 1;
	spin();
	KEEP();
}

NOINLINE void far(void)
{
	run_on_stack(mapping + ABOVE_PAGES * PAGE - 64, far_spin);
	KEEP();
}

static int above(void)
{
	mapping = mmap(NULL, ABOVE_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED || signal(SIGUSR1, move) == SIG_ERR)
		return 1;
	run_on_stack(mapping + 2 * PAGE - 64, wait_to_move);
	KEEP();
	far();
	KEEP();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "above") == 0)
		return above();
	mapping = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED)
		return 1;
	run_on_stack(mapping + HALF - 64, goroutine);
	KEEP();
	return 0;
}
