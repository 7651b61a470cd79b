package recording

import (
	"sort"
	"time"

	"github.com/sprof/sprof/cbf"
)

// ProcessTable answers, while a recording is read, which image map a
// sample's addresses refer to. A process record applies to the samples of
// its PID from its time until the next record for that PID; a sample taken
// before the first record of its PID (a collector reads a process's maps
// just after sampling it for the first time) uses that first record.
type ProcessTable struct {
	byPID  map[uint32][]Process // in order of time
	kernel []Process
}

// NewProcessTable returns an empty table.
func NewProcessTable() *ProcessTable {
	return &ProcessTable{byPID: map[uint32][]Process{}}
}

// Add records the process records of a Processes chunk.
func (t *ProcessTable) Add(procs []Process) {
	for _, pr := range procs {
		if pr.Kernel {
			t.kernel = insertByTime(t.kernel, pr)
			continue
		}
		t.byPID[pr.PID] = insertByTime(t.byPID[pr.PID], pr)
	}
}

func insertByTime(list []Process, pr Process) []Process {
	i := sort.Search(len(list), func(i int) bool { return list[i].Time > pr.Time })
	list = append(list, Process{})
	copy(list[i+1:], list[i:])
	list[i] = pr
	return list
}

// Map returns the image map of process pid at time at, nil when there is
// none (no record, or the process had exited).
func (t *ProcessTable) Map(pid uint32, at time.Duration) *cbf.ImageMap {
	return current(t.byPID[pid], at)
}

// Kernel returns the kernel's image map at time at, nil when unknown.
func (t *ProcessTable) Kernel(at time.Duration) *cbf.ImageMap {
	return current(t.kernel, at)
}

// Damaged says the record that applies to pid at time at has a map lost
// to damage: the samples it applies to cannot be placed.
func (t *ProcessTable) Damaged(pid uint32, at time.Duration) bool {
	pr := applying(t.byPID[pid], at)
	return pr != nil && pr.Damaged
}

// Missing says no record can apply to pid at time at: there is none, or
// only the record of its exit, after at. sprof's writer puts a process's
// record before its samples, so after damage a sample without one lost it.
func (t *ProcessTable) Missing(pid uint32, at time.Duration) bool {
	list := t.byPID[pid]
	return len(list) == 0 || list[0].Exited && at < list[0].Time
}

// Comm returns the process name of the record that applies at time at.
func (t *ProcessTable) Comm(pid uint32, at time.Duration) string {
	if pr := applying(t.byPID[pid], at); pr != nil {
		return pr.Comm
	}
	return ""
}

// Container returns the container of the record that applies at time at,
// "" when unknown.
func (t *ProcessTable) Container(pid uint32, at time.Duration) string {
	if pr := applying(t.byPID[pid], at); pr != nil {
		return pr.Container
	}
	return ""
}

func current(list []Process, at time.Duration) *cbf.ImageMap {
	if pr := applying(list, at); pr != nil {
		return pr.Map
	}
	return nil
}

// applying returns the last record at or before at, or the first record.
func applying(list []Process, at time.Duration) *Process {
	if len(list) == 0 {
		return nil
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].Time > at })
	return &list[max(i-1, 0)]
}
