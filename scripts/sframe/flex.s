# The amd64 FLEX test vector of shared/ref/sframe.md §10 (V10.7): a
# DRAP-style stack realignment, which SFrame V3 describes with FLEX FDEs
# and older versions cannot describe at all (gas skips the function).
	.text
	.globl _start
	.type _start,@function
_start:
	.cfi_startproc
	leaq 8(%rsp), %r10
	.cfi_def_cfa %r10, 0
	andq $-64, %rsp
	pushq -8(%r10)
	pushq %rbp
	.cfi_escape 0x10,0x6,0x2,0x76,0
	movq %rsp, %rbp
	.cfi_escape 0xf,0x3,0x76,0x78,0x6
	nop
	ret
	.cfi_endproc
	.globl f2
	.type f2,@function
f2:
	.cfi_startproc
	ret
	.cfi_endproc
