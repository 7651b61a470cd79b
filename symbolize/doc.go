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
//
// ELF, made by NewELF, is the first backend. For each binary it merges the
// symbols of `.symtab`, `.dynsym`, MiniDebugInfo (`.gnu_debugdata`) and the
// separate debug file (see symbolize/debugfile) into one sorted table, and
// reads DWARF line tables and inlined calls from whichever file has them,
// so an address yields its whole inline stack with files and lines. Go
// programs are named by their `.gopclntab`, which survives stripping, with
// inline frames from DWARF when the program has it, else from the table's
// own inline trees (see symbolize/goinline); the table's entries count
// from where the runtime's own module record says (elfx.GoText), past the
// C start-up code a C linker puts first.
// Addresses that no symbol covers are never given the nearest name hundreds
// of bytes away. Where .eh_frame says which function holds them (a
// stripped library's internal functions) they are named after that
// function's start as the file offset, `liblzma.so.5.4.1+0x15b40`, so the
// addresses of one function add up under one name; elsewhere they give no
// frames and the caller shows `binary+0xoffset`.
//
// GSYM, made by NewGSYM, converts each binary's DWARF once into a GSYM
// file kept on disk by build ID and maps it on later runs, asking the ELF
// symbolizer for what GSYM lacks; with a debuginfod.Client it fetches the
// debug files a host does not have (see symbolize/debuginfod).
//
// Kernel, made by LoadKernel or ReadKallsyms, names kernel addresses from
// /proc/kallsyms, modules included.
//
// The standard library's debug/elf, debug/dwarf and debug/gosym trust their
// input; sprof reads binaries of every process on a host, so every section
// is size-checked before it is read and every call into those packages runs
// inside one recover boundary that turns a panic into an error naming the
// file (see FuzzLoadImage).
package symbolize
