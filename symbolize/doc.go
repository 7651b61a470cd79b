// Package symbolize turns addresses in binaries into function names, source
// files and lines.
//
// A profiler that shows `libfoo.so+0x1a2b` has failed its user. sprof
// symbolizes on the host, while the binaries are still there, from every
// source a binary offers: debug files found by build ID or
// `.gnu_debuglink`, the ELF symbol tables, Go's own symbol table, and
// /proc/kallsyms for the kernel. Backends sit behind one interface,
// Symbolizer, so a faster or richer one (GSYM, see symbolize/gsym) replaces
// another without touching the collector or the exporters.
package symbolize
