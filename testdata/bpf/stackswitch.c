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
 */
#include <stddef.h>
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

int main(void)
{
	mapping = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED)
		return 1;
	run_on_stack(mapping + HALF - 64, goroutine);
	KEEP();
	return 0;
}
