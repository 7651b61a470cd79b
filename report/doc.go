// Package report turns a recording (a .sprof file, package cbf/recording)
// into a stacks.Profile: the "symbolize later" half of "record now,
// symbolize later".
//
// A recording holds addresses and, for each process, the images it had
// mapped: path, build ID, where the text lay. That is enough to symbolize
// on another day or another host, as long as the same files can be found:
// each image is looked up by its path and used only when its build ID is
// the one recorded, since a file at the same path may since have been
// upgraded, and wrong names are worse than none. Kernel frames are named
// from the running kernel's kallsyms only when the recording comes from the
// same kernel release; the caller decides and passes a Kernel symbolizer or
// none.
//
// Samples are read in one pass: process records precede the samples they
// apply to (cbf/FORMAT.md §4), identical samples are counted once, and
// every distinct address is symbolized once at the end. A recording whose
// tail is damaged (its writer was killed) is converted up to the damage,
// which the result reports.
package report
