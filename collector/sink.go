package collector

import (
	"cmp"
	"slices"
	"time"
)

// Sink receives every sample as the collector drains it, with the
// mappings it was taken under, for a recording that is symbolized later
// (a .sprof file) rather than aggregated into a profile now. There is a
// Process call whenever the mappings a pid's samples refer to change
// (first sight, exec, mmap, a pid reused), and an Exit when a process
// ends. container is the ID of the process's container, "" for none
// (stacks.Sample.Container); it changes only with the mappings. Slices
// are valid only during the call. An error (a full disk) is counted in
// Stats.Errors and does not stop the recording.
//
// Calls are not in time order. A sample held back while the unwind table
// it needs is built (unwind_hold.go; at most 2 s) comes after samples,
// exits and process changes taken later, so that they need not wait for
// it. Process and Exit apply by their time, as in a recording
// (cbf/FORMAT.md): a sample refers to the mappings of its pid's record
// with the latest time at or before its own, or of the pid's earliest
// record if it is earlier than all; that record has been told before
// the sample. A held sample may bring a Process call of its own, at its
// time, for the mappings it was taken under.
//
// Samples the sampler lost are not reported to a Sink: Run learns their
// count at the end, in Stats.Lost.
type Sink interface {
	Process(t time.Time, pid uint32, comm, container string, maps []Mapping) error
	Exit(t time.Time, pid uint32) error
	Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool) error
	// OffCPU is called instead of Sample for an off-CPU record: the
	// thread ran again at t after ns nanoseconds off the CPU.
	OffCPU(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool, ns uint64) error
	// Tick is called after every drain, at least every Options.Interval,
	// so that a Sink can complete what it buffers.
	Tick() error
}

// Mapping is one executable mapping of a process, as a Sink sees it:
// runtime addresses [Start, Limit) hold the bytes of the file Path from
// file offset Offset on. BuildID is the file's GNU build ID in lower-case
// hex, "" when unknown.
type Mapping struct {
	Start, Limit, Offset uint64
	Path, BuildID        string
}

// sinkState feeds Options.Sink from the drain: it turns sample times into
// wall-clock times and remembers the process records it reported, so that
// each sample is reported under the mappings it was taken under even when
// it comes late. A nil *sinkState does nothing.
type sinkState struct {
	sink Sink
	// wall and mono are the same instant on the wall clock and on
	// CLOCK_MONOTONIC, which sample and side-band times use.
	wall time.Time
	mono uint64
	// sent holds, for each pid, the records reported, in order of time,
	// as a reader of the recording sees them; records older than every
	// sample still to come are dropped but the last.
	sent map[uint32][]sentRecord
	maps []Mapping
	// jit is the sink as a JITSink, nil when it is none, and jits the
	// collector's JIT files, from which it is told the symbols used.
	jit  JITSink
	jits *jitProcesses
}

// sentRecord is a process record reported: set is the id of its mapSet,
// 0 for an exit.
type sentRecord struct {
	time uint64
	set  uint32
}

func newSinkState(s Sink) *sinkState {
	if s == nil {
		return nil
	}
	st := &sinkState{sink: s, wall: time.Now(), mono: monotonicNow(), sent: map[uint32][]sentRecord{}}
	st.jit, _ = s.(JITSink)
	return st
}

func (s *sinkState) time(mono uint64) time.Time {
	return s.wall.Add(time.Duration(int64(mono - s.mono)))
}

// applying returns the index in recs of the record that applies at time
// t: the last at or before t, or else the first; -1 for none.
func applying(recs []sentRecord, t uint64) int {
	if len(recs) == 0 {
		return -1
	}
	i, _ := slices.BinarySearchFunc(recs, t, func(r sentRecord, t uint64) int {
		return cmp.Compare(r.time, t+1)
	})
	return max(i-1, 0)
}

// record notes a record reported for pid at time t.
func (s *sinkState) record(pid uint32, t uint64, set uint32) {
	recs := s.sent[pid]
	i, _ := slices.BinarySearchFunc(recs, t, func(r sentRecord, t uint64) int {
		return cmp.Compare(r.time, t+1)
	})
	s.sent[pid] = slices.Insert(recs, i, sentRecord{time: t, set: set})
}

// sample reports a sample that add has aggregated under p.key.set; samples
// add skipped (sprof's own) have no set.
func (s *sinkState) sample(p *pending, user, kernel []uint64) error {
	if s == nil || p.key.set == nil {
		return nil
	}
	t := s.time(p.time)
	comm := commString(p.key.comm)
	recs := s.sent[p.key.pid]
	if set := p.key.set; len(set.maps) > 0 && (len(recs) == 0 || recs[applying(recs, p.time)].set != set.id) {
		s.maps = s.maps[:0]
		for _, m := range set.maps {
			s.maps = append(s.maps, Mapping{Start: m.start, Limit: m.limit, Offset: m.offset, Path: m.bin.name, BuildID: m.bin.buildID})
		}
		s.record(p.key.pid, p.time, set.id)
		if err := s.sink.Process(t, p.key.pid, comm, p.key.container, s.maps); err != nil {
			return err
		}
	}
	if jp := s.jitProcess(p.key.pid); jp != nil {
		if err := jp.tell(s.jit, p.key.pid, p.time, s.time, p.key.set, user); err != nil {
			return err
		}
	}
	if p.offCPU > 0 {
		return s.sink.OffCPU(t, p.key.pid, p.key.tid, p.cpu, comm, user, kernel, p.key.truncated, p.offCPU)
	}
	return s.sink.Sample(t, p.key.pid, p.key.tid, p.cpu, comm, user, kernel, p.key.truncated)
}

// pythonSink returns the sink as a PythonSink, when it is one.
func (s *sinkState) pythonSink() (PythonSink, bool) {
	if s == nil {
		return nil, false
	}
	ps, ok := s.sink.(PythonSink)
	return ps, ok
}

// jitProcess returns the JIT files of pid when the sink stores JIT
// symbols and pid runs generated code.
func (s *sinkState) jitProcess(pid uint32) *jitProcess {
	if s.jit == nil || s.jits == nil {
		return nil
	}
	return s.jits.byPid[pid]
}

// retellJIT tells the sink the symbols that the last update found for
// addresses of earlier samples.
func (s *sinkState) retellJIT(j *jitProcesses) error {
	if s == nil || s.jit == nil {
		return nil
	}
	for pid, p := range j.byPid {
		if err := p.retell(s.jit, pid, s.time); err != nil {
			return err
		}
	}
	return nil
}

// exit reports the exit of a process's main thread.
func (s *sinkState) exit(e *event) error {
	if s == nil || e.pid != e.tid {
		return nil
	}
	recs := s.sent[e.pid]
	if len(recs) == 0 || recs[applying(recs, e.time)].set == 0 {
		return nil
	}
	s.record(e.pid, e.time, 0)
	return s.sink.Exit(s.time(e.time), e.pid)
}

// forget drops the records that no sample from time horizon on can need
// (a sample older still would only be reported with a Process again):
// for each pid those before the last at or before horizon, and a pid
// whose only record left is an exit before it.
func (s *sinkState) forget(horizon uint64) {
	if s == nil {
		return
	}
	for pid, recs := range s.sent {
		i := applying(recs, horizon)
		if recs[i].time > horizon {
			continue
		}
		if recs = recs[i:]; len(recs) == 1 && recs[0].set == 0 {
			delete(s.sent, pid)
			continue
		}
		s.sent[pid] = append(s.sent[pid][:0], recs...)
	}
}

func (s *sinkState) tick() error {
	if s == nil {
		return nil
	}
	return s.sink.Tick()
}
