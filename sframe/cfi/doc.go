// Package cfi parses and interprets DWARF call frame information: the
// .eh_frame section that every C, C++ and Rust binary carries for
// exceptions, its .eh_frame_hdr search table, and the .debug_frame section
// of debug builds.
//
// Most code on a production host is built without frame pointers and
// without SFrame, but almost all of it has .eh_frame. Its rules are a small
// byte-code program per function (an FDE, with a shared prologue in its
// CIE) that says, for each range of PCs, how to find the canonical frame
// address (CFA) and where the caller's registers were saved. Running that
// program at sample time is too slow and too complex for a profiler's hot
// path, so sprof runs it once per binary with this package and turns the
// resulting rows into flat SFrame rules (package sframe/synth).
//
// Parse reads a section into CIEs and FDEs; Interpreter.Rows runs one
// FDE's instructions and returns its rows: the address where each row
// starts, the CFA rule and the rules of the registers the caller asked to
// track. Every DW_CFA operation that compilers and assemblers emit is
// decoded, including the expression forms, which are returned as byte
// blocks for the caller to recognize (this package does not evaluate
// DWARF expressions), and the aarch64 DW_CFA_AARCH64_negate_ra_state,
// which toggles Row.RAMangled.
//
// The input is untrusted (sprof reads the binaries of every process on a
// host): every length, offset and count is checked before use, a row
// table is capped at MaxRows and the remember_state stack at
// MaxStateDepth, nothing loops except over input bytes, and every error is
// a *FormatError naming the section offset and the field. An entry whose
// content is bad is left out and its error kept (Frame.Errors); an entry
// whose length is bad ends the parse, because nothing after it can be
// found. Pointer encodings with DW_EH_PE_indirect cannot be resolved
// without the process's memory: a personality routine so encoded is
// returned as the address of its pointer, an FDE start so encoded is an
// error.
package cfi
