// Package jit names code that runtimes generate at run time — JavaScript
// in Node, Java in the JVM, Python 3.12+ with -X perf, .NET — from the
// files those runtimes write for perf: perf maps and jitdumps.
//
// Such code lives in anonymous executable memory: no file backs it, so no
// symbol table names it, and a profiler shows `[unknown] 0x7faf8c006736`.
// Runtimes that are asked to (node --perf-basic-prof, jcmd PID
// Compiler.perfmap, python -X perf, DOTNET_PerfMapEnabled=1) append a
// line `START SIZE NAME` to /tmp/perf-PID.map for every function they
// compile, PID being the process's pid in its own pid namespace. Others
// (node --perf-prof, python -X perf_jit, JVM agents) write a jitdump,
// jit-PID.dump, a binary log of code-load, code-move and debug-info
// records that also maps code to source lines; they map the file
// executable so that perf (and sprof) can find it among the process's
// mappings. The formats are perf's: tools/perf/Documentation/
// jit-interface.txt and jitdump-specification.txt in the Linux tree.
//
// Both files grow while the process runs and may be removed when it
// exits, so Process reads them incrementally — from where the last read
// stopped, leaving a line or record still being written for the next —
// and keeps each file open once found, so its tail is read even after
// the process is gone. Perf maps are found through /proc/PID/root, so the
// file of a process in a container is the container's.
//
// Code is freed and its memory reused, or moved by a compacting
// collector: Table answers with the symbol added last among those
// covering an address, as perf does.
//
// The files are written by the profiled process, which sprof does not
// trust: every read is bounded (a perf map line at MaxName bytes and a
// little, a jitdump record's parsed part at 16 MiB, a file at
// MaxFileBytes), a process's symbols at MaxSymbols and MaxNameBytes, and
// a malformed line or record is skipped and counted, never fatal. A
// jitdump whose record framing cannot be trusted is read no further.
// FuzzPerfMap and FuzzJITDump exercise both parsers.
//
// Debug-info lines are taken as the runtime wrote them. Some runtimes add
// 0x40 (perf's GEN_ELF_TEXT_OFFSET) to their addresses for perf's sake, so
// a line may be attributed up to 64 bytes early; Node 20's V8 writes over
// the start of some file names, and such a record keeps only the lines
// before the damage.
//
// Node buffers its jitdump (2 MiB) and writes it when the buffer fills or
// the process exits, so a process that compiles little names its code only
// at exit; the tail is read then, from the file kept open since the
// process was first seen mapping it.
//
// Cost, measured as CPU time on this project's 2-vCPU VM under a load
// average of 30 (wall times were 3x higher): a lookup of a random address
// among 100,000 symbols about 200 ns (BenchmarkLookup), parsing a Node
// perf map line and adding its symbol about 400 ns (BenchmarkPerfMapParse).
// A drain's new symbols are merged into a process's table in one pass
// (BenchmarkSettle).
package jit
