// Package debugfile finds the separate debug file of an ELF binary.
//
// Distributions strip their binaries and ship the symbols and DWARF apart
// (Debian's -dbg and -dbgsym packages, Fedora's debuginfo): without the
// debug file a profile of libc shows a handful of exported names instead of
// the functions that ran. The search follows gdb's rules so a file that
// gdb finds, sprof finds too: first by GNU build ID under each debug
// directory (DIR/.build-id/xx/rest.debug), then by the `.gnu_debuglink`
// name next to the binary, in its .debug subdirectory and under each debug
// directory followed by the binary's own directory. A candidate is used only
// when it is a regular file whose build ID, or CRC32 for a debuglink, matches
// — so a stale debug file left behind by an upgrade is never trusted.
package debugfile
