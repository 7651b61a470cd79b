// Package gsym reads and writes GSYM files, LLVM's compact symbolization
// format, compatible with llvm-gsymutil.
//
// A profiler symbolizes millions of addresses against binaries whose DWARF
// is large, slow to parse and often compressed. GSYM keeps only what
// symbolization needs — a sorted address table, each function's name, a
// compressed line table and its inline call tree — in one file that is
// memory-mapped and searched with a binary search, decoding one function
// per lookup. A lookup returns the inline stack for an address: the
// innermost inlined function first, each caller after it with the call's
// file and line, the function that contains the code last.
//
// The package covers both versions of the format (version 1, which every
// llvm-gsymutil reads and which Creator writes by default, and the 64-bit
// safe version 2 of LLVM 23) in both byte orders. The Reader follows LLVM's
// lookup rules exactly (equal start addresses, zero-size symbols, the
// line-table and inline-tree walks) and checks every read, since GSYM files
// come from caches and other hosts. The Creator follows LLVM's GsymCreator
// (record selection, string and file tables, encodings) so llvm-gsymutil
// gives the same answers for files sprof writes, and a file LLVM wrote
// decodes and re-encodes to the same bytes.
//
// A Reader finds the function in a small index over the address table,
// then streams what the answer needs from the function's encoded line
// table and inline tree, allocating nothing; functions looked up again
// and again (a profile's hot code) are decoded once into rows and inline
// nodes and kept in a lock-free cache, so they cost two binary searches
// per address. A profile's addresses are best looked up together
// (Reader.LookupBatch): sorted, they are answered in one pass over the
// address table and the records, each function read once for all its
// addresses. Result strings point into the mapped file and stay valid
// until Close.
//
// Converting binaries (DWARF, ELF symbol tables, Breakpad) is the job of
// the subpackage gsym/convert; this package is the format alone.
package gsym
