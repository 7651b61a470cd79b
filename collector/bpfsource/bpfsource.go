// Package bpfsource hands the BPF sampler's samples to the collector.
//
// It is the only place where package collector meets package bpf: the
// collector is tested with recorded or made-up samples and never needs a
// kernel, while this adapter, a field-by-field copy of each sample header
// (the stacks and stack copies are not copied), is tested end to end
// against the real sampler. It marks processes for stack copies on the
// collector's behalf (collector.CopyMarker) and tells the collector when to
// drain (collector.Notifier): with stack copies the sampler's ring is
// small, sized for the caches, and must not wait for a timer.
package bpfsource

import (
	"fmt"

	"github.com/sprof/sprof/bpf"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/symbolize/cpython"
	"github.com/sprof/sprof/unwind/goruntime"
)

// Source is a collector.Source reading from a *bpf.Sampler.
type Source struct {
	sampler *bpf.Sampler
	fn      func(*collector.Sample)
	convert func(*bpf.Sample)
	out     collector.Sample
	// tables are the unwind tables loaded, by the collector's ids.
	tables map[uint64]bpf.TableID
}

// New returns a Source over s; closing s stays the caller's job.
func New(s *bpf.Sampler) *Source {
	src := &Source{sampler: s}
	src.convert = src.deliver
	return src
}

func (src *Source) deliver(s *bpf.Sample) {
	src.out = collector.Sample{
		Time: s.Time, Pid: s.Pid, Tid: s.Tid, CPU: s.CPU, Comm: s.Comm,
		PC: s.PC, SP: s.SP, FP: s.FP, LR: s.LR,
		User: s.User, Kernel: s.Kernel, UserTruncated: s.UserTruncated, LeafReturn: s.LeafReturn, UserTables: s.UserTables, Goroutine: s.Goroutine,
		Python: s.Python, PythonTruncated: s.PythonTruncated, PythonFresh: s.PythonFresh,
		StackCopy: s.StackCopy, StackCopyTruncated: s.StackCopyTruncated,
		OffCPU: s.OffCPU,
	}
	src.fn(&src.out)
}

// Read drains the sampler's backlog and ring without blocking.
func (src *Source) Read(fn func(*collector.Sample)) (int, error) {
	src.fn = fn
	return src.sampler.Read(src.convert)
}

// Ready receives when the sampler's ring is filling and should be read
// before the collector's next Interval (collector.Notifier).
func (src *Source) Ready() <-chan struct{} { return src.sampler.Ready() }

// SetCopy marks pid for stack copies (collector.CopyMarker).
func (src *Source) SetCopy(pid uint32, on bool) error { return src.sampler.SetCopy(pid, on) }

// PythonNamed tells the sampler that the frames of code object code of
// pid were named (see bpf.Sampler.PythonNamed).
func (src *Source) PythonNamed(pid uint32, code uint64) error {
	return src.sampler.PythonNamed(pid, code)
}

// SetPython has the sampler record the Python frames of pid
// (collector.PythonMarker).
func (src *Source) SetPython(pid uint32, p *cpython.Process) error {
	return src.sampler.SetPython(pid, p)
}

// SetGo has the sampler follow runtime.morestack to the goroutine in pid
// (collector.GoMarker).
func (src *Source) SetGo(pid uint32, start, end uint64, rt *goruntime.Runtime) error {
	if rt == nil {
		return src.sampler.SetGo(pid, nil)
	}
	return src.sampler.SetGo(pid, &bpf.GoProcess{MorestackStart: start, MorestackEnd: end, TLSG: rt.TLSG, Layout: rt.Layout})
}

// Stop stops the sampler's events before the last drain (collector.Stopper).
func (src *Source) Stop() error { return src.sampler.Stop() }

// Lost is the number of samples the BPF program could not hand over.
func (src *Source) Lost() (uint64, error) { return src.sampler.Lost() }

// ConvertTable converts a binary's unwind table into the layout of the
// sampler's walk (collector.TableLoader).
func (src *Source) ConvertTable(t *sframe.Table) (collector.KernelTable, error) {
	ut, err := bpf.NewUnwindTable(t)
	if err != nil {
		return nil, err
	}
	return ut, nil
}

// ParseTable decodes a converted table's encoding (collector.TableLoader).
func (src *Source) ParseTable(b []byte) (collector.KernelTable, error) {
	ut, err := bpf.ParseUnwindTable(b)
	if err != nil {
		return nil, err
	}
	return ut, nil
}

// LoadTable loads a converted table into the sampler, for its walk in the
// kernel (collector.TableLoader).
func (src *Source) LoadTable(id uint64, t collector.KernelTable) error {
	ut, ok := t.(*bpf.UnwindTable)
	if !ok {
		return fmt.Errorf("load table %d: a %T, not converted by this Source", id, t)
	}
	tid, err := src.sampler.LoadTable(ut)
	if err != nil {
		return err
	}
	if src.tables == nil {
		src.tables = map[uint64]bpf.TableID{}
	}
	src.tables[id] = tid
	return nil
}

// Evicted returns the tables the sampler evicted, to make room for others,
// since the last call (collector.TableLoader).
func (src *Source) Evicted() []uint64 {
	var out []uint64
	for id, tid := range src.tables {
		if !src.sampler.TableLoaded(tid) {
			out = append(out, id)
			delete(src.tables, id)
		}
	}
	return out
}

// MapTable says pid maps table id's binary at [start, end)
// (collector.TableLoader).
func (src *Source) MapTable(pid uint32, id uint64, start, end, bias uint64) error {
	tid, ok := src.tables[id]
	if !ok {
		return fmt.Errorf("map pid %d [%#x, %#x): no table %d loaded", pid, start, end, id)
	}
	return src.sampler.MapTable(pid, start, end, bias, tid)
}

// MapFramePointers says pid maps code keeping frame pointers at [start,
// end) (collector.TableLoader).
func (src *Source) MapFramePointers(pid uint32, start, end uint64) error {
	return src.sampler.MapFramePointers(pid, start, end)
}

// MapJIT says pid has executable memory of no file at [start, end)
// (collector.TableLoader).
func (src *Source) MapJIT(pid uint32, start, end uint64) error {
	return src.sampler.MapJIT(pid, start, end)
}

// MapProcess says pid is described (collector.TableLoader).
func (src *Source) MapProcess(pid uint32) error { return src.sampler.MapProcess(pid) }

// UnmapPid forgets the mappings of pid (collector.TableLoader).
func (src *Source) UnmapPid(pid uint32) { src.sampler.UnmapPid(pid) }

// TableStats says how the sampler's tables and walks fare
// (collector.TableLoader).
func (src *Source) TableStats() (collector.KernelTableStats, error) {
	st, err := src.sampler.TableStats()
	if err != nil {
		return collector.KernelTableStats{}, err
	}
	k := collector.KernelTableStats{Loaded: st.Loaded, Rows: st.Rows, Used: st.Used, Budget: st.Budget,
		Evicted: st.Evicted, Refused: st.Refused, MappingsRefused: st.MappingsFailed, Walks: map[string]uint64{}}
	for i, n := range st.Walks {
		if n > 0 {
			k.Walks[bpf.TableStop(i).String()] = n
		}
	}
	return k, nil
}
