/*
 * Fixture for the table walk's frame-pointer rule where no table has a
 * rule (x86-64, aarch64): code that keeps frame records but has no CFI,
 * between frames that have CFI and no frame pointers, as in a Node.js or
 * Java process. Built -O2 -fomit-frame-pointer -no-pie by
 * scripts/build-bpf-fixtures.sh. nocfi_call is written in assembly with no
 * CFI directives; jit_call and jit_spin are copied at run time into an
 * anonymous executable page, as a JIT compiler's output is. Modes (the
 * argument):
 *
 *   middle: spin <- inner <- jit_call <- nocfi_call <- outer <- main
 *   top:    jit_spin <- nocfi_call <- outer <- main
 *   signal: top's, and after a second spin in the SIGALRM handler, on the
 *           same stack above the signal frame and jit_spin's record
 *
 * each followed by libc's start code and _start.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;

/* nocfi_call(fn, arg) calls fn(arg) in a frame record of its own. */
void nocfi_call(void (*fn)(void *), void *arg);

#if defined(__x86_64__)
__asm__(".text\n"
	".globl nocfi_call\n"
	".type nocfi_call, @function\n"
	"nocfi_call:\n"
	"	push %rbp\n"
	"	mov %rsp, %rbp\n"
	"	mov %rdi, %rax\n"
	"	mov %rsi, %rdi\n"
	"	call *%rax\n" /* returns to nocfi_call + 12 */
	"	pop %rbp\n"
	"	ret\n"
	".size nocfi_call, . - nocfi_call\n");

/* jit_call(fn): push %rbp; mov %rsp,%rbp; call *%rdi (returns to +6);
 * pop %rbp; ret. */
static const unsigned char jit_call[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
/* jit_spin(): push %rbp; mov %rsp,%rbp; 1: jmp 1b. */
static const unsigned char jit_spin[] = {0x55, 0x48, 0x89, 0xe5, 0xeb, 0xfe};
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl nocfi_call\n"
	".type nocfi_call, %function\n"
	"nocfi_call:\n"
	"	stp x29, x30, [sp, #-16]!\n"
	"	mov x29, sp\n"
	"	mov x2, x0\n"
	"	mov x0, x1\n"
	"	blr x2\n" /* returns to nocfi_call + 20 */
	"	ldp x29, x30, [sp], #16\n"
	"	ret\n"
	".size nocfi_call, . - nocfi_call\n");

/* jit_call(fn): stp x29, x30, [sp, #-16]!; mov x29, sp; blr x0 (returns
 * to +12); ldp x29, x30, [sp], #16; ret. Little-endian words. */
static const unsigned int jit_call[] = {0xa9bf7bfd, 0x910003fd, 0xd63f0000, 0xa8c17bfd, 0xd65f03c0};
/* jit_spin(): stp x29, x30, [sp, #-16]!; mov x29, sp; 1: b 1b. */
static const unsigned int jit_spin[] = {0xa9bf7bfd, 0x910003fd, 0x14000000};
#else
#error "jitwalk is x86-64 and aarch64 code"
#endif

/* Where the functions go in the page: not at its start, so that reading
 * the code before a return address stays in the page, as in a JIT's code
 * space (V8 puts a header before each function's code). */
#define JIT_CALL_AT 16
#define JIT_SPIN_AT 48

NOINLINE static void spin(void)
{
	for (;;)
		sink++;
}

NOINLINE static void inner(void)
{
	volatile char frame[64];

	frame[0] = 1;
	spin();
	sink += frame[0];
}

NOINLINE static void on_alarm(int sig)
{
	volatile char frame[64];

	frame[0] = (char)sig;
	spin();
	sink += frame[0];
}

NOINLINE static void outer(void (*fn)(void *), void *arg)
{
	volatile char frame[64];

	frame[0] = 1;
	nocfi_call(fn, arg);
	sink += frame[0];
}

int main(int argc, char **argv)
{
	unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (page == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(page + JIT_CALL_AT, jit_call, sizeof(jit_call));
	memcpy(page + JIT_SPIN_AT, jit_spin, sizeof(jit_spin));
	__builtin___clear_cache((char *)page, (char *)page + 4096);
	if (argc > 1 && strcmp(argv[1], "signal") == 0) {
		signal(SIGALRM, on_alarm);
		alarm(1);
	}
	if (argc > 1 && (strcmp(argv[1], "top") == 0 || strcmp(argv[1], "signal") == 0))
		outer((void (*)(void *))(page + JIT_SPIN_AT), NULL);
	else
		outer((void (*)(void *))(page + JIT_CALL_AT), (void *)inner);
	return 0;
}
