package bpf

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The off-CPU record format written by offcpu.bpf.c; the constants mirror
// its enums (see record.go for why they are repeated).
const (
	offCPURecordVersion = 0x4f01 // OFFCPU_RECORD_VERSION
	offCPUHeaderSize    = int(unsafe.Sizeof(offcpuOffcpuHeader{}))

	// DefaultOffCPUMin is the default Config.OffCPUMin.
	DefaultOffCPUMin = time.Millisecond
)

// The per-CPU counters of offcpu.bpf.c (enum offcpu_counter).
const (
	offCPUSent = iota
	offCPULost
	offCPUUntracked
	offCPUShort
	offCPUCounters
)

// OffCPUStats are the off-CPU programs' statistics since Open.
type OffCPUStats struct {
	// Switches counts the context switches seen (on every CPU, other
	// processes' included) and SyscallExits the system calls that
	// returned, where records of waits in system calls are finished.
	// RunTimeNs is the run time of both programs, so RunTimeNs / Switches
	// is the cost per switch, system call exits included.
	Switches, SyscallExits, RunTimeNs uint64
	// Sent counts the records put in the ring, Short the switch-ins of
	// followed threads below OffCPUMin, which cost no record.
	Sent, Short uint64
	// Lost counts records that found the ring full and switch-outs the
	// thread table had no room for: waits that went unrecorded.
	Lost uint64
}

// offCPU is the loaded off-CPU programs and their hooks.
type offCPU struct {
	objs  offcpuObjects
	links []link.Link
	user  bool // records carry user stacks, finished at sys_exit
}

// loadOffCPU loads offcpu.bpf.c with the sampler's ring and filter maps in
// place of its own, so both programs' records arrive in one ring in time
// order and one filter selects the processes of both.
func (s *Sampler) loadOffCPU(cfg Config, ringSize int, cpus int) error {
	spec, err := loadOffcpu()
	if err != nil {
		return err
	}
	min := cfg.OffCPUMin
	if min == 0 {
		min = DefaultOffCPUMin
	}
	for name, v := range map[string]any{
		"self_tgid":       uint32(os.Getpid()),
		"cgroup_id":       cfg.CgroupID,
		"filter_pids":     s.filterPids,
		"capture_user":    cfg.User,
		"capture_kernel":  cfg.Kernel,
		"off_cpu_min_ns":  uint64(min),
		"stack_copy_size": uint32(cfg.StackCopy),
		"copy_all":        cfg.CopyAll,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set off-CPU BPF variable %s: %w", name, err)
		}
	}
	spec.Maps["samples"].MaxEntries = uint32(ringSize)
	scratch := spec.Maps["offcpu_scratch"]
	scratch.MaxEntries = uint32(cpus)
	if cfg.StackCopy > 0 {
		scratch.ValueSize += uint32(cfg.StackCopy)
		scratch.Key, scratch.Value = nil, nil
	}
	o := &offCPU{user: cfg.User}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"samples":   s.objs.Samples,
		"copy_pids": s.objs.CopyPids,
		"pids":      s.objs.Pids,
	}}
	if err := spec.LoadAndAssign(&o.objs, opts); err != nil {
		return fmt.Errorf("load off-CPU BPF program: %w", err)
	}
	s.offCPU = o
	return nil
}

// attach hooks the end of system calls first, so no record waits for a
// sys_exit that is not hooked. Without user stacks nothing waits for one:
// the hook, which makes every system call on the host take the kernel's
// slower traced exit, stays off (it is most of the cost of following a
// storm of short system calls, BenchmarkOffCPU).
func (o *offCPU) attach() error {
	progs := []*ebpf.Program{o.objs.SwitchTask}
	if o.user {
		progs = []*ebpf.Program{o.objs.SyscallDone, o.objs.SwitchTask}
	}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach off-CPU program %s: %w", p, err)
		}
		o.links = append(o.links, l)
	}
	return nil
}

// detach unhooks the programs: no more records, and what they sent stays
// in the ring.
func (o *offCPU) detach() error {
	var errs []error
	for _, l := range o.links {
		errs = append(errs, l.Close())
	}
	o.links = nil
	return errors.Join(errs...)
}

func (o *offCPU) close() error {
	return errors.Join(o.detach(), o.objs.Close())
}

func (o *offCPU) stats() (OffCPUStats, error) {
	var st OffCPUStats
	for _, p := range []*ebpf.Program{o.objs.SwitchTask, o.objs.SyscallDone} {
		ps, err := p.Stats()
		if err != nil {
			return st, fmt.Errorf("read off-CPU BPF program statistics: %w", err)
		}
		if p == o.objs.SwitchTask {
			st.Switches = ps.RunCount
		} else {
			st.SyscallExits = ps.RunCount
		}
		st.RunTimeNs += uint64(ps.Runtime)
	}
	var counts [offCPUCounters]uint64
	for i := range counts {
		var perCPU []uint64
		if err := o.objs.OffcpuCounts.Lookup(uint32(i), &perCPU); err != nil {
			return st, fmt.Errorf("read off-CPU counters: %w", err)
		}
		for _, n := range perCPU {
			counts[i] += n
		}
	}
	st.Sent, st.Short = counts[offCPUSent], counts[offCPUShort]
	st.Lost = counts[offCPULost] + counts[offCPUUntracked]
	return st, nil
}

// decodeOffCPU fills s from an off-CPU record.
func (s *Sample) decodeOffCPU(raw []byte) error {
	var h offcpuOffcpuHeader
	if len(raw) < offCPUHeaderSize {
		return &RecordError{Off: 0, Field: "off-CPU header", Msg: fmt.Sprintf("record has %d bytes, header needs %d", len(raw), offCPUHeaderSize)}
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), offCPUHeaderSize), raw)
	if h.OffNs == 0 {
		return &RecordError{Off: int(unsafe.Offsetof(h.OffNs)), Field: "off-CPU time", Msg: "0 ns"}
	}
	b := recordBody{headerSize: offCPUHeaderSize, kernel: int(h.KernelFrames), user: int(h.UserFrames),
		stackBytes: int(h.StackBytes), flags: h.Flags,
		framesOff: int(unsafe.Offsetof(h.UserFrames)), stackBytesOff: int(unsafe.Offsetof(h.StackBytes))}
	if err := s.decodeBody(raw, b); err != nil {
		return err
	}
	s.Time, s.OffCPU = h.Time, h.OffNs
	s.Pid, s.Tid, s.CPU = h.Pid, h.Tid, h.Cpu
	for i, c := range h.Comm {
		s.Comm[i] = byte(c)
	}
	s.PC, s.SP, s.FP, s.LR = h.Pc, h.Sp, h.Fp, h.Lr
	return nil
}
