package collector

import (
	"time"
)

// Sink receives every sample as the collector drains it, with the
// mappings it was taken under, for a recording that is symbolized later
// (a .sprof file) rather than aggregated into a profile now. Calls come in
// time order, and a process's mappings come before the first sample that
// uses them: a Process call whenever the mappings a pid's samples refer to
// change (first sight, exec, mmap, a pid reused), an Exit when a process
// ends. container is the ID of the process's container, "" for none
// (stacks.Sample.Container); it changes only with the mappings. Slices
// are valid only during the call. An error (a full disk) is counted in
// Stats.Errors and does not stop the recording.
//
// Samples the sampler lost are not reported to a Sink: Run learns their
// count at the end, in Stats.Lost.
type Sink interface {
	Process(t time.Time, pid uint32, comm, container string, maps []Mapping) error
	Exit(t time.Time, pid uint32) error
	Sample(t time.Time, pid, tid, cpu uint32, comm string, user, kernel []uint64, userTruncated bool) error
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
// wall-clock times and remembers which mappings each pid's samples were
// last reported under. A nil *sinkState does nothing.
type sinkState struct {
	sink Sink
	// wall and mono are the same instant on the wall clock and on
	// CLOCK_MONOTONIC, which sample and side-band times use.
	wall time.Time
	mono uint64
	sent map[uint32]uint32 // pid → id of the mapSet last reported
	maps []Mapping
}

func newSinkState(s Sink) *sinkState {
	if s == nil {
		return nil
	}
	return &sinkState{sink: s, wall: time.Now(), mono: monotonicNow(), sent: map[uint32]uint32{}}
}

func (s *sinkState) time(mono uint64) time.Time {
	return s.wall.Add(time.Duration(int64(mono - s.mono)))
}

// sample reports a sample that add has aggregated under p.key.set; samples
// add skipped (sprof's own) have no set.
func (s *sinkState) sample(p *pending, user, kernel []uint64) error {
	if s == nil || p.key.set == nil {
		return nil
	}
	t := s.time(p.time)
	comm := commString(p.key.comm)
	if set := p.key.set; len(set.maps) > 0 && s.sent[p.key.pid] != set.id {
		s.maps = s.maps[:0]
		for _, m := range set.maps {
			s.maps = append(s.maps, Mapping{Start: m.start, Limit: m.limit, Offset: m.offset, Path: m.bin.name, BuildID: m.bin.buildID})
		}
		s.sent[p.key.pid] = set.id
		if err := s.sink.Process(t, p.key.pid, comm, p.key.container, s.maps); err != nil {
			return err
		}
	}
	return s.sink.Sample(t, p.key.pid, p.key.tid, p.cpu, comm, user, kernel, p.key.truncated)
}

// exit reports the exit of a process's main thread.
func (s *sinkState) exit(e *event) error {
	if s == nil || e.pid != e.tid {
		return nil
	}
	if _, ok := s.sent[e.pid]; !ok {
		return nil
	}
	delete(s.sent, e.pid)
	return s.sink.Exit(s.time(e.time), e.pid)
}

func (s *sinkState) tick() error {
	if s == nil {
		return nil
	}
	return s.sink.Tick()
}
