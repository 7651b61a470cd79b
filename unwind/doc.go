// Package unwind holds the parts of userspace stack unwinding that do not
// depend on how a profiler tracks processes: why an unwind stopped (Stop)
// and whether the stack it leaves is whole, how a frame was found
// (Method), building a binary's unwind table from its .sframe and
// .eh_frame (BuildTable), building tables in the background, one at a
// time, cheapest first (Builder), and keeping built tables on disk by
// build ID for later runs (Store).
//
// The collector keeps the process table, decides which processes need
// stack copies, and walks each copy with sframe.Unwinder over the tables
// built here.
//
// Only a walk that reached the outermost frame is whole. Every other stop
// — a read outside the stack copy, no rule for a PC, a CFA that does not
// increase, a return address in no mapping, the depth limit, a table not
// built yet — leaves a partial stack, which profiles mark [truncated]
// rather than show as if its last frame were a root.
package unwind
