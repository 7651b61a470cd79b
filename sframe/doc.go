// Package sframe reads SFrame sections (versions 1, 2 and 3, as GNU
// binutils 2.40 to 2.47 write them) and unwinds user stacks with them on
// amd64 and aarch64.
//
// SFrame is a small table that GNU as and ld emit next to .eh_frame: for
// every function, a few rows saying where the canonical frame address
// (CFA), the return address and the frame pointer are at each PC. Unlike
// DWARF CFI it needs no interpreter, so a profiler can turn it into flat
// rules once per binary and unwind code built without frame pointers in a
// few nanoseconds per frame. sprof parses sections of every binary on a
// host, so the parser treats its input as hostile: every offset and count
// is checked before use, allocations are bounded by the section's size,
// and every error is a *FormatError that names the byte offset and the
// field.
//
// What a bad header does and what a bad FDE does differ: a header that is
// inconsistent rejects the section (Parse returns an error); an FDE whose
// rows are out of bounds, whose FRE starts do not increase, whose data
// words do not fit the ABI, or whose range overlaps another's is left out
// of the table, and its error is kept in Table.Errors. Constructs this
// package does not model are errors that wrap ErrUnsupported: in a header
// (the s390x ABI, a version above 3, an auxiliary header) they reject the
// section; in an FDE (a V3 FDE type other than DEFAULT and FLEX) they
// leave it out and Table.Unsupported counts them, which the dumps print
// ("unsupported" in the JSON). Everything binutils 2.47 emits is modelled:
// V3 FLEX FDEs, signal trampolines, PCMASK FDEs and outermost rows.
//
// FDE order: a linked section carries SFRAME_F_FDE_SORTED and its FDEs
// must then be sorted by start address; a section that sets the flag but
// is not sorted is rejected, because the flag is a promise the producer
// broke and the rest of it is not to be trusted. A section without the flag
// (only relocatable objects are written that way) is sorted on parse: the
// table keeps its own sorted index and the section bytes are not touched.
//
// V1 has no rep_size field: its PCMASK (PLT) FDEs repeat every 16 bytes,
// as readelf 2.40 assumes. A row whose start equals the function size
// (binutils PR 33131) is kept and never matches.
//
// The unwinder (Unwinder.Unwind) takes the registers of the topmost frame,
// a Memory to read the stack from (a Snapshot of stack bytes, or process
// memory) and a Resolver that maps a PC to the Table of its binary and the
// load bias, and writes PCs into a slice the caller provides. It does not
// allocate, and says with a StopReason why it stopped. It looks up return
// addresses minus one (the call, not the instruction after it), strips
// aarch64 pointer authentication codes from signed return addresses, uses
// the link register only in the topmost frame, evaluates V3 FLEX rules on
// SP, FP (and LR in the topmost frame) and stops on rules needing other
// registers, and stops at V3 signal trampolines, whose registers SFrame
// cannot describe. Where a mapping has no rule for a PC but keeps frame
// pointers (Mapping.FramePointers, or SFRAME_F_FRAME_POINTER), it follows
// the frame-pointer chain for that frame. Package sframe depends on
// nothing but the standard library.
package sframe
