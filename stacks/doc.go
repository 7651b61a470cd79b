// Package stacks is sprof's in-memory model of a CPU profile: call stacks
// whose frames are resolved to the binaries they ran in and, where symbols
// exist, to functions, files and lines.
//
// It is the one currency between the parts of sprof that produce stacks (the
// live collector, the recording reader) and the parts that encode them (pprof,
// folded stacks, flame graphs, speedscope, Pyroscope). Keeping it a plain data
// model — no I/O, no encoders — lets every exporter be a function over the same
// value and lets tests build profiles by hand.
package stacks
