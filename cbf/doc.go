// Package cbf encodes and decodes stacks in the Compact Backtrace Format
// (CBF) and process image maps in the Compact ImageMap Format (CIF), both
// byte-compatible with the Swift runtime's Runtime module, which defined them.
//
// sprof records stacks now and symbolizes them later, possibly on another
// host. A stack of 40 return addresses is 320 bytes as raw 64-bit words; in
// CBF, where each address is written as the shortest signed delta from the
// previous one (or absolutely when that is shorter) and runs of equal frames
// collapse to a repeat, the same stack takes two to three bytes a frame.
// The ImageMap next to it says which file (by path and build ID) each address
// belongs to, so a symbolizer can find the binary and turn the address into a
// file offset without the process still running. Reusing Swift's formats
// rather than inventing new ones means the bytes can be checked against an
// implementation nobody here wrote, and that tools built for Swift crash logs
// can read sprof's stacks.
//
// Decoders treat their input as hostile: they bound-check every read, cap
// the frames a record may expand to and the sizes of image maps, never
// panic, and report errors as *FormatError naming the byte offset and the
// field. Decoding into a caller's slice allocates nothing per frame.
//
// The recording file that stores many such stacks over time lives in
// package cbf/recording; its layout is documented in cbf/FORMAT.md.
package cbf
