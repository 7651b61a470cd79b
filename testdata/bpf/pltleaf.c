/*
 * Fixture for sprof's BPF walk through a PLT stub, x86-64 and aarch64.
 * Built -O2 -fno-omit-frame-pointer -no-pie by
 * scripts/build-bpf-fixtures.sh.
 *
 * main -> a -> b -> c -> stub, spinning in stub: code shaped like a PLT
 * entry (x86-64: jmp *slot(%rip); aarch64: adrp x16; ldr x17, [x16];
 * add x16, x16; br x17) whose slot holds the stub's own address. Like a
 * real PLT stub it is a frameless leaf: its caller's return address is on
 * top of the stack (x86-64) or in x30 (aarch64), where GNU ld emits no
 * unwind table for .plt; unlike one, every sample lands in it.
 */
#define NOINLINE __attribute__((noinline, noclone))
/* Code after each call keeps -O2 from turning it into a tail jump. */
#define KEEP() __asm__ volatile("" ::: "memory")

void stub(void);
#if defined(__x86_64__)
__asm__(".text\n.globl stub\n.type stub,@function\nstub:\n"
	"\tjmp *slot(%rip)\n"
	".size stub, .-stub\n"
	".data\n.balign 8\nslot:\n\t.quad stub\n.text\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl stub\n.type stub,%function\nstub:\n"
	"\tadrp x16, slot\n\tldr x17, [x16, #:lo12:slot]\n\tadd x16, x16, #:lo12:slot\n\tbr x17\n"
	".size stub, .-stub\n"
	".data\n.balign 8\nslot:\n\t.quad stub\n.text\n");
#else
#error "x86-64 and aarch64 only"
#endif

NOINLINE void c(void) { stub(); KEEP(); }
NOINLINE void b(void) { c(); KEEP(); }
NOINLINE void a(void) { b(); KEEP(); }

int main(void)
{
	a();
	return 0;
}
