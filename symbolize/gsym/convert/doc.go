// Package convert builds GSYM files (see package gsym) from what binaries
// and symbol servers offer: DWARF 4 and 5 (compressed sections too, and
// separate debug files found by build ID or .gnu_debuglink), the ELF
// symbol table, and Breakpad .sym files.
//
// A symbolizer is only as good as its agreement with the tools users
// trust, so the DWARF and symbol-table conversion follows llvm-gsymutil
// --convert rule for rule: which DIEs become functions (one per address
// range, stopping at dead-stripped ranges: low ≥ high, an all-ones
// tombstone, or a start outside every executable section), how C and C++
// names are qualified, which line rows a function keeps, how inline trees
// are cut to their parents' ranges, and how symbol-table entries are
// merged with debug info. sprof's tests compare the result with
// llvm-gsymutil's, address by address.
//
// Conversion reads one compilation unit at a time on every core and adds
// the units' functions in unit order, so the output does not depend on
// scheduling and memory holds the decompressed sections plus the units in
// flight, not a tree of the whole DWARF. The DWARF reader is the
// package's own: a converter needs a dozen attributes of eight tags, so it
// walks DIEs in place with abbreviations compiled into skip steps and
// decodes attributes only when it reads them, where debug/dwarf decoded
// every attribute of every DIE into allocated fields. Uncompressed
// sections and the symbol table are read from the mapped file.
package convert
