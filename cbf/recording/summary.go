package recording

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Summary describes a recording as a whole, for `sprof info`.
type Summary struct {
	Header Header
	// Intact is the length of the readable part: up to the damaged tail,
	// or the whole file.
	Intact int64
	// Chunks counts intact chunks, Unknown those of types this package
	// does not know (written by a newer sprof).
	Chunks, Unknown int
	// Bytes counts the bytes of the intact chunks by type, their headers
	// and checksums included: where the size of a recording goes.
	Bytes   map[ChunkType]int64
	Samples uint64
	// OffCPU counts off-CPU records (ChunkOffCPU), and OffCPUTime is the
	// time they waited.
	OffCPU     uint64
	OffCPUTime time.Duration
	Lost       uint64
	// Stacks counts the entries of the stack tables: the distinct stacks
	// and the shared parts of stacks, each stored once.
	Stacks int
	// Processes counts the distinct PIDs with process records, Images the
	// distinct images (by build ID, or path for those without one) in
	// their maps, the kernel's included.
	Processes, Images int
	// FirstSample and LastSample bound the sample times.
	FirstSample, LastSample time.Duration
	// End is the End chunk, nil when the writer never closed the file.
	End *End
	// Damage lists the damaged stretches skipped (the first 64),
	// Damaged counts them; a file cut short ends in one.
	Damage  []*DamagedError
	Damaged int
	// Unplaced counts the samples of intact chunks whose stacks or
	// process maps were lost to damage.
	Unplaced uint64

	table    *StackTable // the stack table being counted, and its length
	tableLen int
}

// Duration is the time the recording covers: from the start to the End
// chunk, or to the last sample when the writer did not close it.
func (s *Summary) Duration() time.Duration {
	if s.End != nil {
		return s.End.Time
	}
	return s.LastSample
}

// Summarize reads a whole recording. Damage is not an error: it is
// reported in Summary.Damage. Malformed content in an intact chunk is.
func Summarize(r io.Reader) (*Summary, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	s := &Summary{Header: rd.Header(), Bytes: map[ChunkType]int64{ChunkHeader: rd.Offset() - int64(len(Magic))}}
	pids := map[uint32]bool{}
	images := map[string]bool{}
	for {
		c, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		s.Chunks++
		s.Bytes[c.Type] += chunkHead + int64(len(c.Payload)) + chunkTail
		if err := s.add(&c, pids, images); err != nil {
			return nil, fmt.Errorf("recording: %v chunk at offset %d: %w", c.Type, c.Offset, err)
		}
	}
	s.Intact = rd.Offset()
	s.Damage, s.Damaged = rd.Damage()
	if len(s.Damage) > 0 && s.Damage[len(s.Damage)-1].End == s.Intact {
		s.Intact = s.Damage[len(s.Damage)-1].Offset
	}
	s.Processes, s.Images = len(pids), len(images)
	return s, nil
}

func (s *Summary) add(c *Chunk, pids map[uint32]bool, images map[string]bool) error {
	switch c.Type {
	case ChunkProcesses:
		for _, pr := range c.Processes() {
			if !pr.Kernel && !pr.Exited {
				pids[pr.PID] = true
			}
			if pr.Map == nil {
				continue
			}
			for _, im := range pr.Map.Images() {
				if im.BuildID != nil {
					images["id:"+string(im.BuildID)] = true
				} else {
					images["path:"+im.Path] = true
				}
			}
		}
	case ChunkSamples:
		b, err := c.Batch()
		if err != nil {
			return err
		}
		s.Lost += b.Lost
		for _, g := range b.Groups {
			if b.Unplaced(&g) {
				s.Unplaced += uint64(len(g.Times))
			}
			for _, t := range g.Times {
				if s.Samples == 0 || t < s.FirstSample {
					s.FirstSample = t
				}
				s.LastSample = max(s.LastSample, t)
				s.Samples++
			}
		}
	case ChunkOffCPU:
		b, err := c.Batch()
		if err != nil {
			return err
		}
		for _, g := range b.Groups {
			s.OffCPU += uint64(len(g.Times))
			s.OffCPUTime += time.Duration(g.Weight) * time.Duration(len(g.Times))
		}
	case ChunkEnd:
		e, err := c.End()
		if err != nil {
			return err
		}
		s.End = &e
	case ChunkStacks:
		// The Reader has added its entries to the table; a chunk that
		// starts a new table has a new one.
		if c.stacks != s.table {
			s.table, s.tableLen = c.stacks, 0
		}
		s.Stacks += c.nstacks - s.tableLen
		s.tableLen = c.nstacks
	case ChunkHeader:
		return fmt.Errorf("a second header")
	case ChunkTables:
	default:
		s.Unknown++
	}
	return nil
}
