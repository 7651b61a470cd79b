// Package recording reads and writes sprof recordings (.sprof files): the
// samples of a profiling session stored as they were taken, with the image
// maps of the processes they came from, so they can be symbolized later and
// elsewhere.
//
// A recording must survive the way profilers die in production: killed
// with SIGKILL, out of disk, host rebooted. It is therefore an append-only
// stream of small chunks, each with its length and a CRC-32C, and the
// writer completes a chunk at least once a FlushInterval (a second by
// default). A reader of a file cut at any byte gets every chunk written
// before the cut and learns where the damaged tail starts; chunks of types
// it does not know are skipped by their length, so older readers read newer
// files.
//
// Stacks are stored in the Compact Backtrace Format of package cbf, image
// maps in its Compact ImageMap Format, and the identical stacks and samples
// of a batch only once, with a count. The byte layout is specified in
// cbf/FORMAT.md.
package recording
