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
// before the cut and learns where the damage starts; a chunk damaged in the
// middle of a file is skipped, the reader goes on at the next intact one,
// and the samples that refer to what the damaged chunk defined are marked
// lost. Chunks of types it does not know are skipped by their length, so
// older readers read newer files.
//
// Each distinct stack and each distinct image map is stored once per
// recording: a stack table, whose entries share their outer frames with
// earlier ones, and map and image tables grow as the recording does, and
// samples and process records refer to them. A chunk refers only to
// entries of chunks before it or of itself, so a cut never leaves a
// reference dangling. Samples equal but for their time are stored once per
// batch, with their times, and a batch stores of each group only what
// differs from the group before. Code that processes compiled at run time
// (JIT) is named by the symbols the recording stores for it (Writer.JIT),
// since the runtimes' perf maps are gone where it is reported. The byte
// layout is specified in cbf/FORMAT.md; the reader reads format versions 2
// and 3.
package recording
