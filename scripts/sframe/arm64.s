// The aarch64 test vector of shared/ref/sframe.md §10 (V10.5): an
// outermost _start (.cfi_undefined x30), a PAC-signed non-leaf f1 and a leaf.
	.text
	.globl _start
	.type _start,%function
_start:
	.cfi_startproc
	.cfi_undefined x30
	mov x29, #0
	bl f1
	b .
	.cfi_endproc
	.globl f1
	.type f1,%function
f1:
	.cfi_startproc
	paciasp
	.cfi_negate_ra_state
	stp x29, x30, [sp, -16]!
	.cfi_def_cfa_offset 16
	.cfi_offset 29, -16
	.cfi_offset 30, -8
	mov x29, sp
	bl leaf
	ldp x29, x30, [sp], 16
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	autiasp
	.cfi_negate_ra_state
	ret
	.cfi_endproc
	.globl leaf
	.type leaf,%function
leaf:
	.cfi_startproc
	nop
	ret
	.cfi_endproc
