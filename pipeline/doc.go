// Package pipeline wires sprof's data path once: the collector (process
// table and side band), then the BPF sampler, with the userspace unwinder
// and the symbolizers, all from one Config. `sprof record` runs a
// Pipeline to its end and gets one profile (or writes a recording through
// a collector.Sink); `sprof agent` drains it on a period and cuts an
// Interval at every boundary, whose frames it names off the drain
// goroutine.
//
// It exists because the two commands used to wire the same parts each in
// its own way, and the second copy missed options: the agent walked frame
// pointers only, and every program built without them lost its callers.
// No bpf.Config or collector.Options is built anywhere else.
package pipeline
