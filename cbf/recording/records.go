package recording

import (
	"encoding/binary"
	"time"

	"github.com/sprof/sprof/cbf"
)

// Process is a process record: the images a process has mapped from Time
// on, until the next record for the same PID.
type Process struct {
	// Time is the offset from the recording's start.
	Time time.Duration
	PID  uint32
	// Kernel marks the image map of the kernel and its modules, which
	// the kernel stacks of all processes refer to; PID is 0.
	Kernel bool
	// Exited says the process is gone; Map is nil.
	Exited bool
	Comm   string
	// Container names the container the process runs in (a container
	// runtime's ID, as the collector found it in the process's cgroup);
	// empty when unknown or not in a container. At most MaxContainer
	// bytes: a writer cuts longer ones.
	Container string
	Map       *cbf.ImageMap
}

// MaxContainer caps a process record's container name. Container IDs are
// 64 hex digits (Docker, containerd, CRI-O); the cap leaves room for
// runtimes that name containers otherwise.
const MaxContainer = 256

// Bits of a process record's flags field.
const (
	processKernel = 1 << iota
	processExited
)

func (pr *Process) appendRecord(dst []byte, d *mapDict) []byte {
	dst = binary.AppendVarint(dst, int64(pr.Time))
	dst = binary.AppendUvarint(dst, uint64(pr.PID))
	var flags uint64
	if pr.Kernel {
		flags |= processKernel
	}
	if pr.Exited {
		flags |= processExited
	}
	dst = binary.AppendUvarint(dst, flags)
	dst = appendString(dst, pr.Comm)
	if pr.Map == nil {
		return binary.AppendUvarint(dst, 0)
	}
	return d.appendMap(dst, pr.Map)
}

// parseProcesses parses a Processes chunk, adding the maps, images and
// containers it defines to t.
func parseProcesses(p payload, t *mapTable) ([]Process, error) {
	n, err := p.count("process count", 5)
	if err != nil {
		return nil, err
	}
	procs := make([]Process, n)
	for i := range procs {
		if err := parseProcess(&p, &procs[i], t); err != nil {
			return nil, err
		}
	}
	if p.off == len(p.b) {
		return procs, nil // written without containers
	}
	return procs, t.parseContainers(&p, procs)
}

func parseProcess(p *payload, pr *Process, maps *mapTable) error {
	t, err := p.varint("process time")
	if err != nil {
		return err
	}
	pr.Time = time.Duration(t)
	if pr.PID, err = p.uint32("pid"); err != nil {
		return err
	}
	flags, err := p.uvarint("process flags")
	if err != nil {
		return err
	}
	pr.Kernel, pr.Exited = flags&processKernel != 0, flags&processExited != 0
	if pr.Comm, err = p.string("comm"); err != nil {
		return err
	}
	pr.Map, err = maps.parseMap(p)
	return err
}

// Batch is the samples of one Samples chunk. Samples that differ only in
// time are stored once, as a Group.
type Batch struct {
	// Lost counts the samples the collector could not take or keep since
	// the batch before.
	Lost uint64
	// Stacks is the recording's stack table, which the groups' stacks
	// index.
	Stacks *StackTable
	Groups []Group
}

// Group is a set of samples equal in all but their time.
type Group struct {
	PID, TID, CPU uint32
	Comm          string
	// User and Kernel index Batch.Stacks; -1 when the sample has no such
	// stack. An index names the same stack in every batch that shares the
	// table.
	User, Kernel int
	Flags        Flags
	// Weight is what each sample counts for, 1 for a plain sample.
	Weight uint64
	// Times holds one offset from the recording's start per sample.
	Times []time.Duration
}

// Samples returns the number of samples in the batch.
func (b *Batch) Samples() int {
	n := 0
	for i := range b.Groups {
		n += len(b.Groups[i].Times)
	}
	return n
}

// parseBatch parses a Samples chunk whose stacks are the first nstacks of
// table t: those of the chunks before it.
func parseBatch(p payload, t *StackTable, nstacks int) (*Batch, error) {
	base, err := p.varint("batch time")
	if err != nil {
		return nil, err
	}
	b := &Batch{Stacks: t}
	if b.Lost, err = p.uvarint("lost"); err != nil {
		return nil, err
	}
	n, err := p.count("comm count", 1)
	if err != nil {
		return nil, err
	}
	comms := make([]string, n)
	for i := range comms {
		if comms[i], err = p.string("comm"); err != nil {
			return nil, err
		}
	}
	if n, err = p.count("group count", 10); err != nil {
		return nil, err
	}
	b.Groups = make([]Group, n)
	prevPID, prevFirst := int64(0), base
	for i := range b.Groups {
		g := &b.Groups[i]
		if err := parseGroup(&p, g, comms, nstacks, prevPID, prevFirst); err != nil {
			return nil, err
		}
		prevPID, prevFirst = int64(g.PID), int64(g.Times[0])
	}
	return b, nil
}

// parseGroup reads a group whose pid is stored relative to prevPID, tid
// relative to its pid and first time relative to prevFirst.
func parseGroup(p *payload, g *Group, comms []string, stacks int, prevPID, prevFirst int64) error {
	var err error
	if g.PID, err = p.delta32("pid", prevPID); err != nil {
		return err
	}
	if g.TID, err = p.delta32("tid", int64(g.PID)); err != nil {
		return err
	}
	if g.CPU, err = p.uint32("cpu"); err != nil {
		return err
	}
	off := p.off
	comm, err := p.uvarint("comm index")
	if err != nil {
		return err
	}
	if comm >= uint64(len(comms)) {
		return p.errorf(off, "comm index", "%d of %d comms", comm, len(comms))
	}
	g.Comm = comms[comm]
	if g.User, err = stackIndex(p, "user stack", stacks); err != nil {
		return err
	}
	if g.Kernel, err = stackIndex(p, "kernel stack", stacks); err != nil {
		return err
	}
	flags, err := p.uint32("flags")
	if err != nil {
		return err
	}
	g.Flags = Flags(flags)
	if g.Weight, err = p.uvarint("weight"); err != nil {
		return err
	}
	off = p.off
	n, err := p.count("sample count", 1)
	if err != nil {
		return err
	}
	if n == 0 {
		return p.errorf(off, "sample count", "a group without samples")
	}
	g.Times = make([]time.Duration, n)
	t := prevFirst
	for i := range g.Times {
		d, err := p.varint("sample time")
		if err != nil {
			return err
		}
		t += d
		g.Times[i] = time.Duration(t)
	}
	return nil
}

// stackIndex reads a stack reference: 0 for none, i+1 for stack i.
func stackIndex(p *payload, field string, stacks int) (int, error) {
	off := p.off
	v, err := p.uvarint(field)
	if err != nil {
		return 0, err
	}
	if v > uint64(stacks) {
		return 0, p.errorf(off, field, "stack %d of %d", v, stacks)
	}
	return int(v) - 1, nil
}

// End is the content of the End chunk a closed recording finishes with.
type End struct {
	// Time is when recording stopped, as an offset from the start.
	Time time.Duration
	// Samples and Lost are the totals over the recording.
	Samples, Lost uint64
}

func (e *End) appendPayload(dst []byte) []byte {
	dst = binary.AppendVarint(dst, int64(e.Time))
	dst = binary.AppendUvarint(dst, e.Samples)
	return binary.AppendUvarint(dst, e.Lost)
}

func parseEnd(p payload) (End, error) {
	var e End
	t, err := p.varint("end time")
	if err != nil {
		return e, err
	}
	e.Time = time.Duration(t)
	if e.Samples, err = p.uvarint("sample total"); err != nil {
		return e, err
	}
	e.Lost, err = p.uvarint("lost total")
	return e, err
}
