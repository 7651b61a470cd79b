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
	// Damaged says the process's map was lost to damage (see Reader):
	// Map is nil, and its samples' user frames cannot be placed.
	Damaged bool
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

// recordBase is what a process record's time and pid are stored relative
// to: those of the record before it in its chunk (zero for the first).
type recordBase struct {
	time int64 // µs
	pid  int64
}

// appendRecord appends pr as the next record of a processes chunk, whose
// previous record is at prev.
func (pr *Process) appendRecord(dst []byte, prev *recordBase, d *mapDict) []byte {
	t := micros(int64(pr.Time))
	dst = binary.AppendVarint(dst, t-prev.time)
	dst = binary.AppendVarint(dst, int64(pr.PID)-prev.pid)
	prev.time, prev.pid = t, int64(pr.PID)
	var flags uint64
	if pr.Kernel {
		flags |= processKernel
	}
	if pr.Exited {
		flags |= processExited
	}
	dst = binary.AppendUvarint(dst, flags)
	if pr.Exited {
		return dst
	}
	dst = appendString(dst, pr.Comm)
	if pr.Map == nil {
		return binary.AppendUvarint(dst, 0)
	}
	return d.appendMap(dst, pr.Map)
}

// parseProcesses parses a Processes chunk, adding the maps, images and
// containers it defines to t.
func parseProcesses(p payload, t *mapTable) ([]Process, error) {
	n, err := p.count("process count", 3)
	if err != nil {
		return nil, err
	}
	procs := make([]Process, n)
	var prev recordBase
	for i := range procs {
		if p.version == 2 {
			err = parseProcessV2(&p, &procs[i], t)
		} else {
			err = parseProcess(&p, &procs[i], &prev, t)
		}
		if err != nil {
			return nil, err
		}
	}
	if p.off == len(p.b) {
		return procs, nil // written without containers
	}
	return procs, t.parseContainers(&p, procs)
}

func parseProcess(p *payload, pr *Process, prev *recordBase, maps *mapTable) error {
	off := p.off
	t, err := p.varint("process time")
	if err != nil {
		return err
	}
	if prev.time, err = addMicros(prev.time, t); err != nil {
		return p.errorf(off, "process time", "%v", err)
	}
	pr.Time = time.Duration(prev.time) * time.Microsecond
	if pr.PID, err = p.delta32("pid", prev.pid); err != nil {
		return err
	}
	prev.pid = int64(pr.PID)
	flags, err := p.uvarint("process flags")
	if err != nil {
		return err
	}
	pr.Kernel, pr.Exited = flags&processKernel != 0, flags&processExited != 0
	if pr.Exited {
		return nil
	}
	if pr.Comm, err = p.string("comm"); err != nil {
		return err
	}
	pr.Map, pr.Damaged, err = maps.parseMap(p)
	return err
}

// parseProcessV2 reads a process record of format version 2: an absolute
// time in nanoseconds and pid, and a comm and map even when exited.
func parseProcessV2(p *payload, pr *Process, maps *mapTable) error {
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
	pr.Map, pr.Damaged, err = maps.parseMap(p)
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

// Unplaced says a group's stacks were lost to damage (see Reader): its
// samples cannot be shown.
func (b *Batch) Unplaced(g *Group) bool {
	return g.User >= 0 && b.Stacks.Lost(g.User) || g.Kernel >= 0 && b.Stacks.Lost(g.Kernel)
}

// Samples returns the number of samples in the batch.
func (b *Batch) Samples() int {
	n := 0
	for i := range b.Groups {
		n += len(b.Groups[i].Times)
	}
	return n
}

// Bits of a group's head (format version 3): which fields follow, and the
// truncation of its stacks.
const (
	groupPID         = 1 << iota // the pid differs from the group before's
	groupTID                     // the tid differs from the pid
	groupComm                    // the comm differs from the group before's
	groupUser                    // a user stack
	groupKernel                  // a kernel stack
	groupUserTrunc               // the user stack is truncated
	groupCount                   // more than one sample
	groupCPU                     // the cpu differs from the group before's
	groupKernelTrunc             // the kernel stack is truncated
	groupWeight                  // a weight other than 1
	groupBits        = iota
)

// groupBase is what a group's fields are stored relative to: those of the
// group before it in its batch.
type groupBase struct {
	pid, cpu, comm uint32
	user, kernel   int   // stack indexes
	first          int64 // µs
}

// parseBatch parses a Samples chunk whose stacks are the first nstacks of
// table t: those of the chunks before it.
func parseBatch(p payload, t *StackTable, nstacks int) (*Batch, error) {
	off := p.off
	base, err := p.varint("batch time")
	if err != nil {
		return nil, err
	}
	if p.version > 2 && (base > maxMicros || base < -maxMicros) {
		return nil, p.errorf(off, "batch time", "%d µs is out of range", base)
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
	if p.version == 2 {
		return b, parseGroupsV2(&p, b, comms, nstacks, base)
	}
	if n, err = p.count("group count", 2); err != nil {
		return nil, err
	}
	b.Groups = make([]Group, n)
	prev := groupBase{first: base}
	for i := range b.Groups {
		if err := parseGroup(&p, &b.Groups[i], comms, nstacks, base, &prev); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// parseGroup reads a group of format version 3, whose fields differ from
// those of the group before, prev.
func parseGroup(p *payload, g *Group, comms []string, stacks int, base int64, prev *groupBase) error {
	off := p.off
	head, err := p.uvarint("group head")
	if err != nil {
		return err
	}
	if head>>groupBits != 0 {
		return p.errorf(off, "group head", "%#x: unknown bits", head)
	}
	g.PID, g.TID, g.CPU, g.Weight = prev.pid, prev.pid, prev.cpu, 1
	if head&groupPID != 0 {
		if g.PID, err = p.delta32("pid", int64(prev.pid)); err != nil {
			return err
		}
	}
	g.TID = g.PID
	if head&groupTID != 0 {
		if g.TID, err = p.delta32("tid", int64(g.PID)); err != nil {
			return err
		}
	}
	if head&groupCPU != 0 {
		if g.CPU, err = p.uint32("cpu"); err != nil {
			return err
		}
	}
	comm := prev.comm
	if head&groupComm != 0 {
		off := p.off
		if comm, err = p.uint32("comm index"); err != nil {
			return err
		}
		if comm >= uint32(len(comms)) {
			return p.errorf(off, "comm index", "%d of %d comms", comm, len(comms))
		}
	}
	if len(comms) == 0 {
		return p.errorf(off, "comm index", "a group in a batch without comms")
	}
	g.Comm = comms[comm]
	g.User, g.Kernel = -1, -1
	if head&groupUser != 0 {
		if g.User, err = stackDelta(p, "user stack", prev.user, stacks); err != nil {
			return err
		}
		prev.user = g.User
	}
	if head&groupKernel != 0 {
		if g.Kernel, err = stackDelta(p, "kernel stack", prev.kernel, stacks); err != nil {
			return err
		}
		prev.kernel = g.Kernel
	}
	if head&groupUserTrunc != 0 {
		g.Flags |= UserTruncated
	}
	if head&groupKernelTrunc != 0 {
		g.Flags |= KernelTruncated
	}
	if head&groupWeight != 0 {
		if g.Weight, err = p.uvarint("weight"); err != nil {
			return err
		}
	}
	n := 1
	if head&groupCount != 0 {
		off := p.off
		if n, err = p.count("sample count", 1); err != nil {
			return err
		}
		if n == 0 {
			return p.errorf(off, "sample count", "a group without samples")
		}
	}
	// The first time is from the group before's, or from the batch's base
	// where the cpu changes; each further one from the one before it.
	t := prev.first
	if head&groupCPU != 0 {
		t = base
	}
	g.Times = make([]time.Duration, n)
	for i := range g.Times {
		off := p.off
		d, err := p.uvarint("sample time")
		if err != nil {
			return err
		}
		if t, err = addMicros(t, int64(min(d, uint64(maxMicros)+1))); err != nil {
			return p.errorf(off, "sample time", "%v", err)
		}
		g.Times[i] = time.Duration(t) * time.Microsecond
	}
	prev.pid, prev.cpu, prev.comm, prev.first = g.PID, g.CPU, comm, int64(g.Times[0]/time.Microsecond)
	return nil
}

// stackDelta reads a stack index stored as the difference from prev.
func stackDelta(p *payload, field string, prev, stacks int) (int, error) {
	off := p.off
	d, err := p.varint(field)
	if err != nil {
		return 0, err
	}
	if d < int64(-prev) || d >= int64(stacks-prev) {
		return 0, p.errorf(off, field, "stack %d%+d of %d", prev, d, stacks)
	}
	return prev + int(d), nil
}

// parseGroupsV2 reads the groups of a batch of format version 2, where
// every field is present and times are in nanoseconds.
func parseGroupsV2(p *payload, b *Batch, comms []string, stacks int, base int64) error {
	n, err := p.count("group count", 10)
	if err != nil {
		return err
	}
	b.Groups = make([]Group, n)
	prevPID, prevFirst := int64(0), base
	for i := range b.Groups {
		g := &b.Groups[i]
		if err := parseGroupV2(p, g, comms, stacks, prevPID, prevFirst); err != nil {
			return err
		}
		prevPID, prevFirst = int64(g.PID), int64(g.Times[0])
	}
	return nil
}

// parseGroupV2 reads a group whose pid is stored relative to prevPID, tid
// relative to its pid and first time relative to prevFirst.
func parseGroupV2(p *payload, g *Group, comms []string, stacks int, prevPID, prevFirst int64) error {
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
