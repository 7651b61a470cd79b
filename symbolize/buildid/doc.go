// Package buildid reads the GNU build ID of an ELF file, and of the running
// kernel from the note stream it exports.
//
// The build ID is how sprof names a binary: caches of unwind tables and
// symbols, separate debug files and debuginfod are all keyed by it, so a
// binary replaced on disk under the same path is never confused with the old
// one. Profiled processes may map any file, including hostile ones, so the
// reader parses only the ELF header, the program and section headers and the
// notes they locate (PT_NOTE segments first, then SHT_NOTE sections, where
// the Go linker leaves .note.gnu.build-id), checks every bound itself and
// reads a few kilobytes for a typical binary.
package buildid
