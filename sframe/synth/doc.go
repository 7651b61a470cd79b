// Package synth turns DWARF call frame information (.eh_frame, and
// .debug_frame where .eh_frame has no entry) into SFrame tables.
//
// Few binaries carry SFrame, almost all carry .eh_frame. For the common
// case (the CFA is the stack or frame pointer plus an offset, the return
// address and the frame pointer are saved at fixed offsets from the CFA)
// the two say the same thing, and an SFrame table is what sprof's
// unwinder and BPF program run on. FromELF interprets every FDE with
// package cfi and keeps the rows SFrame can express, which is what GNU as
// does when it writes .sframe from the same .cfi_* directives: the tests
// compare the two, function by function, on binaries built with
// -Wa,--gsframe.
//
// A row SFrame cannot express is not guessed: DWARF expressions, a CFA
// on another register (stack realignment through r10 or DRAP), a return
// address not at CFA-8 on amd64 or not in the link register or at a CFA
// offset on aarch64, a frame pointer saved in a register. Such rows are
// counted by Reason in Stats and left out, and the function is split
// around them, so that an unwinder finds no rule there and falls back
// (frame pointers, or stop) rather than a wrong one. Consecutive rows
// with the same rule are merged.
//
// PLT stubs: GNU ld describes the lazy PLT of amd64 with one DWARF
// expression, CFA = rsp + 8 + ((rip & 15) >= 11 ? 8 : 0), because all
// entries share one FDE. synth recognizes that expression (for any
// power-of-two block size and threshold) and writes what ld writes in
// .sframe for it: a PCMASK FDE with rows "+0 sp+8" and "+11 sp+16"
// repeating every 16 bytes. The first PLT entry (PLT0) and .plt.got or
// .plt.sec stubs have ordinary rows. aarch64 PLTs have no CFI at all.
package synth
