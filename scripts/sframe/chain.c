/*
 * chain.c: an SFrame unwinding fixture for sprof's sframe package.
 *
 * main -> walk -> realign -> deep(3) -> deep(2) -> deep(1) -> deep(0) -> leaf
 *
 * Built with -O2 -fomit-frame-pointer -Wa,--gsframe, so only SFrame (or
 * .eh_frame) can unwind it. realign uses a variable-length array, which
 * makes GCC set up a frame pointer there: its rows have an FP-based CFA.
 * leaf is a true leaf (no frame; on aarch64 its return address stays in
 * LR). Every function records the return address the compiler knows
 * (__builtin_return_address), leaf captures pc, sp, fp (and lr) and copies
 * the stack from sp up to argv, and main writes it all to the file named
 * by argv[1]. The calls to printf/fopen go through the PLT, so amd64
 * fixtures also carry ld's PLT FDEs.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAXSTACK 65536
#define NFRAMES 8

extern const char __ehdr_start[];

static volatile uintptr_t ras[NFRAMES];
static volatile uintptr_t reg_pc, reg_sp, reg_fp, reg_lr;
static uintptr_t stack_top;
static uint64_t stack_copy[MAXSTACK / 8];
static volatile uintptr_t stack_len;

__attribute__((noipa)) static int leaf(int x)
{
	uintptr_t pc, sp, fp, lr = 0;
#if defined(__x86_64__)
	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
			 : "=r"(pc), "=r"(sp), "=r"(fp));
#elif defined(__aarch64__)
	__asm__ volatile("adr %0, .\n\tmov %1, sp\n\tmov %2, x29\n\tmov %3, x30"
			 : "=r"(pc), "=r"(sp), "=r"(fp), "=r"(lr));
#else
#error unsupported architecture
#endif
	reg_pc = pc;
	reg_sp = sp;
	reg_fp = fp;
	reg_lr = lr;
	uintptr_t n = stack_top - sp;
	if (n > MAXSTACK)
		n = MAXSTACK;
	/* volatile reads keep GCC from turning the copy into a memcpy call,
	 * which would make leaf a non-leaf. */
	const volatile uint64_t *src = (const volatile uint64_t *)sp;
	for (uintptr_t i = 0; i < n / 8; i++)
		stack_copy[i] = src[i];
	stack_len = n & ~(uintptr_t)7;
#if defined(__aarch64__)
	/* __builtin_return_address strips a PAC with xpaclri, which clobbers
	 * x30, so GCC would save it and leaf would stop being a leaf. In a
	 * leaf, x30 is the return address that bl wrote. */
	ras[0] = lr;
#else
	ras[0] = (uintptr_t)__builtin_return_address(0);
#endif
	return x + 1;
}

__attribute__((noipa)) static int deep(int n)
{
	int r;
	if (n == 0)
		r = leaf(n);
	else
		r = deep(n - 1);
	ras[1 + n] = (uintptr_t)__builtin_return_address(0);
	return r * 3 + n;
}

__attribute__((noipa)) static int realign(int n)
{
	volatile char vla[n * 16 + 8];
	vla[0] = (char)n;
	int r = deep(vla[0]);
	ras[5] = (uintptr_t)__builtin_return_address(0);
	return r + vla[0];
}

__attribute__((noipa)) static int walk(int n)
{
	char buf[200];
	snprintf(buf, sizeof buf, "%d", n);
	int r = realign(buf[0] - '0');
	ras[6] = (uintptr_t)__builtin_return_address(0);
	return r + buf[1];
}

int main(int argc, char **argv)
{
	stack_top = (uintptr_t)argv;
	int r = walk(3);
	ras[7] = (uintptr_t)__builtin_return_address(0);
	if (argc < 2)
		return r == 0;
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 1;
	fprintf(f, "sframe-stack-dump 1\n");
#if defined(__x86_64__)
	fprintf(f, "arch amd64\n");
#else
	fprintf(f, "arch arm64\n");
#endif
	fprintf(f, "ehdr %#lx\n", (unsigned long)(uintptr_t)__ehdr_start);
	fprintf(f, "pc %#lx\nsp %#lx\nfp %#lx\nlr %#lx\n", (unsigned long)reg_pc,
		(unsigned long)reg_sp, (unsigned long)reg_fp, (unsigned long)reg_lr);
	fprintf(f, "frames %#lx", (unsigned long)reg_pc);
	for (int i = 0; i < NFRAMES; i++)
		fprintf(f, " %#lx", (unsigned long)ras[i]);
	fprintf(f, "\nstack %#lx %lu\n", (unsigned long)reg_sp, (unsigned long)stack_len);
	const unsigned char *b = (const unsigned char *)stack_copy;
	for (uintptr_t i = 0; i < stack_len; i++)
		fprintf(f, "%02x%s", b[i], (i % 32 == 31 || i + 1 == stack_len) ? "\n" : "");
	return fclose(f) != 0;
}
