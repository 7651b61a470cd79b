/*
 * Fixture for sprof's BPF frame-pointer walker, x86-64 and aarch64. Built
 * -O2 -fno-omit-frame-pointer -no-pie by scripts/build-bpf-fixtures.sh.
 * Each mode spins forever in a known state; the test samples it and
 * compares the walked stack with addresses read from this binary.
 *
 *   chain       main -> a -> b -> c, spinning in c
 *   indirect    main -> a_ind -> (through a pointer) b_ind -> c: b_ind's
 *               frame record returns after an indirect call
 *   prologue    main -> leafloop, which calls leaf in a loop; samples land
 *               on leaf's push %rbp, mov %rsp,%rbp, pop %rbp and ret
 *               (aarch64: stp x29, x30; mov x29, sp; ldp x29, x30; ret)
 *   below-sp    rbp (aarch64: x29, likewise below) points below the
 *               stack pointer
 *   misaligned  rbp is not 8-byte aligned
 *   self-loop   rbp points at a frame record whose saved rbp is itself
 *   above-stack S  rbp points at a well-formed frame record written into
 *               the argument string S (24 bytes or more), which lies above
 *               the stack's end (the initial stack pointer)
 *   other-stack main -> on_other_stack, which calls c on a stack of its
 *               own (a separate mapping), linked back by frame pointers
 *   other-data  rbp points at a frame record on another mapping whose
 *               return address follows no call
 *   deep N      main -> recurse x N -> c
 *   fork        reads a line from stdin, then forks a child running chain,
 *               which dies with it
 *   syscalls    sys_loop calls getppid (frameless, through the PLT) forever
 *   stubs       main -> stubloop, which calls spinleaf, a frameless leaf,
 *               in a loop through stubs that only jump to it: x86-64 Go's
 *               ABI0 wrapper in both its forms, and a bare jmp; aarch64 a
 *               bare b, as Go's wrapper is there; and calls loopleaf, a
 *               frameless leaf that starts with a jump into its own body,
 *               past its loop (as Go compiles a for loop), no stub
 *   fault       main -> faultloop, which calls pageleaf in a loop after
 *               dropping pageleaf's page (a page of its own) from the
 *               page tables: each call faults fetching pageleaf's first
 *               instruction, and samples in that fault have pc at
 *               pageleaf, whose code cannot be read then
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

volatile unsigned long sink;
volatile int stop;

#define NOINLINE __attribute__((noinline, noclone))
/* Code after each call keeps -O2 from turning it into a tail jump. */
#define KEEP() __asm__ volatile("" ::: "memory")

NOINLINE void c(void) { while (!stop) sink++; }
NOINLINE void b(void) { c(); KEEP(); }
NOINLINE void a(void) { b(); KEEP(); }
NOINLINE void b_ind(void) { c(); KEEP(); }
void (*volatile b_ind_ptr)(void) = b_ind;
NOINLINE void a_ind(void) { b_ind_ptr(); KEEP(); }

NOINLINE void recurse(int n)
{
	if (n > 0)
		recurse(n - 1);
	else
		c();
	KEEP();
}

NOINLINE void sys_loop(void)
{
	for (;;) {
		getppid();
		KEEP();
	}
}

/* pageleaf alone in a page: its section starts at a page and is padded to
 * the next. x86-64 and aarch64 both run 4 KiB pages here. */
#define PAGE 4096
void pageleaf(void);

NOINLINE void faultloop(void)
{
	void *page = (void *)((unsigned long)pageleaf & ~(PAGE - 1UL));

	for (;;) {
		madvise(page, PAGE, MADV_DONTNEED);
		pageleaf();
		KEEP();
	}
}

#if defined(__x86_64__)
__asm__(".section .text.pageleaf,\"ax\",@progbits\n.balign 4096\n"
	".globl pageleaf\n.type pageleaf,@function\npageleaf:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n\tpop %rbp\n\tret\n"
	".size pageleaf, .-pageleaf\n.balign 4096\n.text\n");

/* spinleaf lies below the stubs, so only the jump the stub makes leads
 * below a call's target to it. The jumps are spelled out as jmp rel32,
 * which an assembler could shorten. */
void stubloop(void);
__asm__(".text\n"
	".globl stubloop\n.type stubloop,@function\nstubloop:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n"
	"1:\tcall gowrapper\n\tcall gowrapper_pie\n\tcall jmpstub\n\tcall loopleaf\n\tjmp 1b\n"
	".size stubloop, .-stubloop\n"
	".globl loopleaf\n.type loopleaf,@function\nloopleaf:\n"
	"\t.byte 0xe9\n\t.long 2f - (. + 4)\n1:\tdec %ecx\n\tjnz 1b\n\tret\n2:\tmov $4096,%ecx\n\tjmp 1b\n"
	".size loopleaf, .-loopleaf\n"
	".globl spinleaf\n.type spinleaf,@function\nspinleaf:\n"
	"\tmov $4096,%ecx\n2:\tdec %ecx\n\tjnz 2b\n\tret\n"
	".size spinleaf, .-spinleaf\n"
	".globl gowrapper\n.type gowrapper,@function\ngowrapper:\n"
	"\txorps %xmm15,%xmm15\n\tmov %fs:-8,%r14\n\t.byte 0xe9\n\t.long spinleaf - (. + 4)\n"
	".size gowrapper, .-gowrapper\n"
	".globl gowrapper_pie\n.type gowrapper_pie,@function\ngowrapper_pie:\n"
	"\txorps %xmm15,%xmm15\n\tmov $-8,%r14\n\tmov %fs:(%r14),%r14\n\t.byte 0xe9\n\t.long spinleaf - (. + 4)\n"
	".size gowrapper_pie, .-gowrapper_pie\n"
	".globl jmpstub\n.type jmpstub,@function\njmpstub:\n"
	"\t.byte 0xe9\n\t.long spinleaf - (. + 4)\n"
	".size jmpstub, .-jmpstub\n");

void leafloop(void);
__asm__(".text\n"
	".globl leaf\n.type leaf,@function\nleaf:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n\tpop %rbp\n\tret\n"
	".size leaf, .-leaf\n"
	".globl leafloop\n.type leafloop,@function\nleafloop:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n"
	"1:\tcall leaf\n\tjmp 1b\n"
	".size leafloop, .-leafloop\n");

NOINLINE void spin_below_sp(void) { __asm__ volatile("lea -64(%rsp),%rbp\n1: jmp 1b"); }
NOINLINE void spin_misaligned(void) { __asm__ volatile("lea 3(%rsp),%rbp\n1: jmp 1b"); }
/* A frame record {saved rbp = itself, return address = 0x401234}. */
NOINLINE void spin_self_loop(void)
{
	__asm__ volatile("sub $16,%rsp\n\tmov %rsp,(%rsp)\n\tmovq $0x401234,8(%rsp)\n"
			 "\tmov %rsp,%rbp\n1: jmp 1b");
}
/* rec is a readable frame record {saved rbp = 0, return address =
 * 0x401234} above the end of the stack: the walk must not follow rbp to it. */
NOINLINE void spin_above_stack(unsigned long *rec)
{
	rec[0] = 0;
	rec[1] = 0x401234;
	__asm__ volatile("mov %0,%%rbp\n1: jmp 1b" ::"r"(rec));
}
/* A frame record {saved rbp = 64 bytes higher, return address = -1}: the
 * address is no user code, so the walk must stop before it. */
NOINLINE void spin_bad_return(void)
{
	__asm__ volatile("sub $16,%rsp\n\tlea 64(%rsp),%rax\n\tmov %rax,(%rsp)\n\tmovq $-1,8(%rsp)\n"
			 "\tmov %rsp,%rbp\n1: jmp 1b"); /* never returns: rax is free */
}

/* on_other_stack(top) runs c on a stack of its own, the way Go runs vDSO
 * and cgo calls on the thread's g0 stack: c's frame record links back to
 * on_other_stack's record on the thread's stack. c never returns. */
void on_other_stack(char *top);
__asm__(".text\n"
	".globl on_other_stack\n.type on_other_stack,@function\non_other_stack:\n"
	"\tpush %rbp\n\tmov %rsp,%rbp\n\tmov %rdi,%rsp\n\tcall c\n"
	"\tmov %rbp,%rsp\n\tpop %rbp\n\tret\n"
	".size on_other_stack, .-on_other_stack\n");

/* rec is a frame record {0, address of zeros} on another mapping: its
 * return address follows no call, so the walk must not switch stacks to it. */
NOINLINE void spin_other_data(unsigned long *rec)
{
	rec[0] = 0;
	rec[1] = (unsigned long)(rec + 8);
	__asm__ volatile("mov %0,%%rbp\n1: jmp 1b" ::"r"(rec));
}
#elif defined(__aarch64__)
__asm__(".section .text.pageleaf,\"ax\",%progbits\n.balign 4096\n"
	".globl pageleaf\n.type pageleaf,%function\npageleaf:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n\tldp x29, x30, [sp], #16\n\tret\n"
	".size pageleaf, .-pageleaf\n.balign 4096\n.text\n");

/* spinleaf lies below the stub, so only the stub's branch leads below a
 * call's target to it. */
void stubloop(void);
__asm__(".text\n"
	".globl stubloop\n.type stubloop,%function\nstubloop:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n"
	"1:\tbl bstub\n\tbl loopleaf\n\tb 1b\n"
	".size stubloop, .-stubloop\n"
	".globl loopleaf\n.type loopleaf,%function\nloopleaf:\n"
	"\tb 2f\n1:\tsubs x9, x9, #1\n\tb.ne 1b\n\tret\n2:\tmov x9, #4096\n\tb 1b\n"
	".size loopleaf, .-loopleaf\n"
	".globl spinleaf\n.type spinleaf,%function\nspinleaf:\n"
	"\tmov x9, #4096\n2:\tsubs x9, x9, #1\n\tb.ne 2b\n\tret\n"
	".size spinleaf, .-spinleaf\n"
	".globl bstub\n.type bstub,%function\nbstub:\n"
	"\tb spinleaf\n"
	".size bstub, .-bstub\n");

void leafloop(void);
__asm__(".text\n"
	".globl leaf\n.type leaf,%function\nleaf:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n\tldp x29, x30, [sp], #16\n\tret\n"
	".size leaf, .-leaf\n"
	".globl leafloop\n.type leafloop,%function\nleafloop:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n"
	"1:\tbl leaf\n\tb 1b\n"
	".size leafloop, .-leafloop\n");

NOINLINE void spin_below_sp(void) { __asm__ volatile("sub x29, sp, #64\n1: b 1b"); }
NOINLINE void spin_misaligned(void) { __asm__ volatile("add x29, sp, #3\n1: b 1b"); }
/* A frame record {saved fp = itself, return address = 0x401234}. */
NOINLINE void spin_self_loop(void)
{
	__asm__ volatile("sub sp, sp, #16\n\tmov x9, sp\n\tstr x9, [sp]\n\tmov x9, #0x1234\n"
			 "\tmovk x9, #0x40, lsl #16\n\tstr x9, [sp, #8]\n\tmov x29, sp\n1: b 1b" ::: "x9");
}
/* rec is a readable frame record {saved fp = 0, return address =
 * 0x401234} above the end of the stack: the walk must not follow fp to it. */
NOINLINE void spin_above_stack(unsigned long *rec)
{
	rec[0] = 0;
	rec[1] = 0x401234;
	__asm__ volatile("mov x29, %0\n1: b 1b" ::"r"(rec));
}
/* A frame record {saved fp = 64 bytes higher, return address = -1}: the
 * address is no user code, so the walk must stop before it. */
NOINLINE void spin_bad_return(void)
{
	__asm__ volatile("sub sp, sp, #16\n\tadd x9, sp, #64\n\tstr x9, [sp]\n\tmov x9, #-1\n"
			 "\tstr x9, [sp, #8]\n\tmov x29, sp\n1: b 1b" ::: "x9");
}

/* on_other_stack(top): see the x86-64 version. */
void on_other_stack(char *top);
__asm__(".text\n"
	".globl on_other_stack\n.type on_other_stack,%function\non_other_stack:\n"
	"\tstp x29, x30, [sp, #-16]!\n\tmov x29, sp\n\tmov sp, x0\n\tbl c\n"
	"\tmov sp, x29\n\tldp x29, x30, [sp], #16\n\tret\n"
	".size on_other_stack, .-on_other_stack\n");

/* rec is a frame record {0, address of zeros} on another mapping: its
 * return address follows no call, so the walk must not switch stacks to it. */
NOINLINE void spin_other_data(unsigned long *rec)
{
	rec[0] = 0;
	rec[1] = (unsigned long)(rec + 8);
	__asm__ volatile("mov x29, %0\n1: b 1b" ::"r"(rec));
}
#else
#error "fpwalk: x86-64 or aarch64 only"
#endif

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "chain";

	if (!strcmp(mode, "chain"))
		a();
	else if (!strcmp(mode, "indirect"))
		a_ind();
	else if (!strcmp(mode, "prologue"))
		leafloop();
	else if (!strcmp(mode, "below-sp"))
		spin_below_sp();
	else if (!strcmp(mode, "misaligned"))
		spin_misaligned();
	else if (!strcmp(mode, "self-loop"))
		spin_self_loop();
	else if (!strcmp(mode, "above-stack") && argc > 2 && strlen(argv[2]) >= 24)
		spin_above_stack((unsigned long *)(((unsigned long)argv[2] + 7) & ~7UL));
	else if (!strcmp(mode, "bad-return"))
		spin_bad_return();
	else if (!strcmp(mode, "syscalls"))
		sys_loop();
	else if (!strcmp(mode, "stubs"))
		stubloop();
	else if (!strcmp(mode, "fault"))
		faultloop();
	else if (!strcmp(mode, "other-stack") || !strcmp(mode, "other-data")) {
		size_t size = 1 << 16;
		char *other = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (other == MAP_FAILED)
			return 1;
		if (!strcmp(mode, "other-stack"))
			on_other_stack(other + size - 64);
		else
			spin_other_data((unsigned long *)other + 256);
	} else if (!strcmp(mode, "deep") && argc > 2)
		recurse(atoi(argv[2]));
	else if (!strcmp(mode, "fork")) {
		char line[8];
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		pid_t parent = getpid();
		if (fork() == 0) {
			/* Die with the parent, which the test kills. */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
				return 1;
			a();
		}
		wait(NULL);
	} else {
		fprintf(stderr, "usage: fpwalk chain|indirect|prologue|below-sp|misaligned|self-loop|above-stack S|bad-return|other-stack|other-data|deep N|fork|syscalls|stubs|fault\n");
		return 2;
	}
	KEEP();
	return 0;
}
