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
// Stacks are stored in the Compact Backtrace Format of package cbf and
// image maps in its Compact ImageMap Format, each distinct one once per
// recording: a stack table, whose entries share their outer frames with
// earlier ones, and a map table grow as the recording does, and samples
// refer to them. A chunk refers only to entries of chunks before it or of
// itself, so a cut never leaves a reference dangling. Samples equal but
// for their time are stored once per batch, with their times. The byte
// layout is specified in cbf/FORMAT.md.
package recording
