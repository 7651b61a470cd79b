# The amd64 test vector of shared/ref/sframe.md §10 (V10.1, V10.2, V10.4):
# an FP-based function and a leaf with a stack frame.
	.text
	.globl _start
	.type _start,@function
_start:
	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	nop
	nop
	popq %rbp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.globl f2
	.type f2,@function
f2:
	.cfi_startproc
	subq $24, %rsp
	.cfi_def_cfa_offset 32
	addq $24, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
