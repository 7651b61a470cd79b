package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
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
	offCPUDropped
	offCPUShort
	offCPUCut
	offCPUExits
	offCPUCounters
)

// OffCPUStats are the off-CPU programs' statistics since Open.
type OffCPUStats struct {
	// Switches counts the context switches seen (on every CPU, other
	// processes' included) and RunTimeNs the run time of the switch
	// program and the sys_exit hook together, so RunTimeNs / Switches is
	// the cost per switch, system call exits included; both need
	// Config.RunTimeStats. SyscallExits counts the system calls that
	// returned while the sys_exit hook was on.
	Switches, SyscallExits, RunTimeNs uint64
	// Sent counts the records put in the ring, Short the switch-ins of
	// followed threads below OffCPUMin, which cost no record (counted with
	// Config.RunTimeStats only: a counter on nearly every switch).
	Sent, Short uint64
	// Lost counts waits of OffCPUMin or more that went unrecorded: their
	// record found the ring full, another thread took their place in the
	// table of switch-out times, or they waited for the sys_exit hook as
	// it went off.
	Lost uint64
	// Cut counts records of waits in system calls sent with the user pc
	// alone (marked truncated) because the sys_exit hook was off for the
	// CPU budget (Config.OffCPUExitBudget), and ExitHookPauses how often
	// it went off.
	Cut, ExitHookPauses uint64
	// ExitHookSilent counts attachments of the sys_exit hook that did not
	// fire and were made again (see offCPU.exitHookOn).
	ExitHookSilent uint64
}

// DefaultOffCPUExitBudget is the default Config.OffCPUExitBudget: about 1%
// of a CPU at the 150-300 ns a traced system call exit costs on sprof's
// CI VM (BenchmarkOffCPU's storm, which makes four system calls a round
// trip, lost 6% more of its round trips with the hook kept on), less on
// bare metal.
const DefaultOffCPUExitBudget = 40_000

// The sys_exit hook's governor (see exitGovernor): how often it looks,
// and how long the hook stays off once it is over the budget before it
// looks again.
const (
	exitGovernorTick  = 250 * time.Millisecond
	exitHookOffPeriod = 15 * time.Second
)

// exitHookAttempts bounds the attachments of the sys_exit hook made
// before one is seen to fire (see exitHookOn).
const exitHookAttempts = 4

// offCPU is the loaded off-CPU programs and their hooks.
type offCPU struct {
	objs     offcpuObjects
	onSwitch link.Link
	user     bool // records of waits in system calls are finished at sys_exit

	// mu guards the sys_exit hook, which the governor turns off and on.
	mu     sync.Mutex
	exit   link.Link // nil while off
	gen    uint64    // the last exit_gen set
	pauses uint64
	silent uint64 // attachments that did not fire
	// attachExit, if not nil, replaces the sys_exit program's attachment
	// (a test's that does not fire).
	attachExit func() (link.Link, error)
	governor   exitGovernor
	stop       chan struct{} // closed by detach to end the governor
	done       chan struct{} // closed when the governor has ended
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
		"filter_pids":     len(cfg.Pids) > 0,
		"capture_user":    cfg.User,
		"capture_kernel":  cfg.Kernel,
		"off_cpu_min_ns":  uint64(min),
		"stack_copy_size": uint32(cfg.StackCopy),
		"ring_size":       uint64(ringSize),
		"copy_all":        cfg.CopyAll,
		"count_short":     cfg.RunTimeStats,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set off-CPU BPF variable %s: %w", name, err)
		}
	}
	spec.Maps["samples"].MaxEntries = uint32(ringSize)
	spec.Maps["pids"].MaxEntries = s.objs.Pids.MaxEntries() // the sampler's, which replaces it
	sizeOffCPUScratch(spec, cpus, cfg.StackCopy)
	budget := cfg.OffCPUExitBudget
	if budget == 0 {
		budget = DefaultOffCPUExitBudget
	}
	o := &offCPU{user: cfg.User, governor: exitGovernor{budget: budget, offPeriod: exitHookOffPeriod}}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"samples":   s.objs.Samples,
		"pid_marks": s.objs.PidMarks,
		"pids":      s.objs.Pids,
	}}
	if err := spec.LoadAndAssign(&o.objs, opts); err != nil {
		return fmt.Errorf("load off-CPU BPF program: %w", err)
	}
	s.offCPU = o
	return nil
}

// attach hooks the context switch and, with user stacks, the end of
// system calls first, so no record waits for a sys_exit that is not
// hooked, and starts the governor that keeps that hook within its budget.
func (o *offCPU) attach() error {
	if o.user {
		if err := o.exitHookOn(); err != nil {
			return err
		}
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: o.objs.SwitchTask})
	if err != nil {
		return fmt.Errorf("attach off-CPU program %s: %w", o.objs.SwitchTask, err)
	}
	o.onSwitch = l
	if o.user && o.governor.budget > 0 {
		// The first tick judges the rate since now.
		exits, err := o.perCPU(offCPUExits)
		if err != nil {
			return err
		}
		o.governor.step(time.Now(), true, exits)
		o.stop, o.done = make(chan struct{}), make(chan struct{})
		go o.govern(time.NewTicker(exitGovernorTick))
	}
	return nil
}

// exitHookOn attaches the sys_exit hook, then opens a new generation of
// pending records (exit_gen): records kept for a hook that was off
// meanwhile are of an older one, and dropped.
//
// An attachment that the kernel accepted is checked to fire before it is
// trusted, because one that does not loses every wait in a system call
// without a trace: each stays pending for an exit that never comes. The
// check (exitsCounted) reads the exit counter twice: the first read is a
// system call, whose exit a working hook counts before the second. A
// silent attachment is detached and made again, at most exitHookAttempts
// times. In Debian 11's arm64 kernel (5.10), under emulation, 6 of the 40
// attachments that ten runs of the off-CPU tests logged counted no exit
// while the tests made system calls (none in the matrix's seven other
// kernels); attached again, each fired. The check sees a hook that fires
// for no system call, not one that some CPUs would skip.
func (o *offCPU) exitHookOn() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exit != nil {
		return nil
	}
	for attempt := 1; o.exit == nil; attempt++ {
		l, err := o.attachExitHook()
		if err != nil {
			return fmt.Errorf("attach off-CPU program %s: %w", o.objs.SyscallDone, err)
		}
		fires, err := o.exitsCounted()
		switch {
		case err != nil:
			return errors.Join(err, l.Close())
		case fires:
			o.exit = l
		case attempt == exitHookAttempts:
			return errors.Join(fmt.Errorf("attach off-CPU program %s: the sys_exit hook did not fire in %d attachments", o.objs.SyscallDone, attempt), l.Close())
		default:
			o.silent++
			if err := l.Close(); err != nil {
				return fmt.Errorf("detach a silent off-CPU program %s: %w", o.objs.SyscallDone, err)
			}
		}
	}
	o.gen++
	if err := o.objs.PendingThreads.Set(uint64(0)); err != nil {
		return fmt.Errorf("reset off-CPU pending count: %w", err)
	}
	if err := o.objs.ExitGen.Set(o.gen); err != nil {
		return fmt.Errorf("set off-CPU exit generation: %w", err)
	}
	return nil
}

// exitHookOff tells the switch program to send records of waits in
// system calls at once, then detaches the sys_exit hook.
func (o *offCPU) exitHookOff() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exit == nil {
		return nil
	}
	err := o.objs.ExitGen.Set(uint64(0))
	err = errors.Join(err, o.exit.Close())
	o.exit = nil
	o.pauses++
	return err
}

// govern turns the sys_exit hook off and on as exitGovernor says, at each
// tick, until detach.
func (o *offCPU) govern(tick *time.Ticker) {
	defer close(o.done)
	defer tick.Stop()
	for {
		select {
		case <-o.stop:
			return
		case now := <-tick.C:
			exits, err := o.perCPU(offCPUExits)
			if err != nil {
				continue
			}
			o.mu.Lock()
			on := o.exit != nil
			o.mu.Unlock()
			switch want := o.governor.step(now, on, exits); {
			case want && !on:
				o.exitHookOn()
			case !want && on:
				o.exitHookOff()
			}
		}
	}
}

// exitGovernor decides whether the sys_exit hook stays on. The hook makes
// every system call on the host take the kernel's traced path, a cost in
// proportion to the rate of system calls, which a context-switch storm or
// a busy server multiplies. While the busiest CPU returns from more than
// budget system calls a second, the hook goes off for offPeriod, after
// which it comes on again to measure; records of waits in system calls
// meanwhile carry the user pc alone (OffCPUStats.Cut).
type exitGovernor struct {
	budget    int // system call exits per second on one CPU
	offPeriod time.Duration

	last     time.Time // the previous step with the hook on, zero if none
	exits    []uint64  // per-CPU exits counted then
	offUntil time.Time
}

// step takes the per-CPU exit counters at now, with the hook on or not,
// and says whether it should be on.
func (g *exitGovernor) step(now time.Time, on bool, exits []uint64) bool {
	if !on {
		g.last = time.Time{}
		return !now.Before(g.offUntil)
	}
	last, prev := g.last, g.exits
	g.last, g.exits = now, append(g.exits[:0:0], exits...)
	if last.IsZero() || len(prev) != len(exits) || !now.After(last) {
		return true
	}
	var busiest uint64
	for i, n := range exits {
		busiest = max(busiest, n-prev[i])
	}
	if float64(busiest)/now.Sub(last).Seconds() <= float64(g.budget) {
		return true
	}
	g.offUntil = now.Add(g.offPeriod)
	g.last = time.Time{}
	return false
}

// detach unhooks the programs: no more records, and what they sent stays
// in the ring.
func (o *offCPU) detach() error {
	if o.stop != nil {
		close(o.stop)
		<-o.done
		o.stop = nil
	}
	var errs []error
	if o.onSwitch != nil {
		errs = append(errs, o.onSwitch.Close())
		o.onSwitch = nil
	}
	o.mu.Lock()
	if o.exit != nil {
		errs = append(errs, o.exit.Close())
		o.exit = nil
	}
	o.mu.Unlock()
	return errors.Join(errs...)
}

func (o *offCPU) close() error {
	return errors.Join(o.detach(), o.objs.Close())
}

func (o *offCPU) attachExitHook() (link.Link, error) {
	if o.attachExit != nil {
		return o.attachExit()
	}
	return link.AttachTracing(link.TracingOptions{Program: o.objs.SyscallDone})
}

// exitsCounted reports whether the sys_exit hook counts system call
// exits: the exit of the first of two reads of the counter is seen by the
// second.
func (o *offCPU) exitsCounted() (bool, error) {
	first, err := o.total(offCPUExits)
	if err != nil {
		return false, err
	}
	second, err := o.total(offCPUExits)
	return second > first, err
}

// total returns one of the program's per-CPU counters, summed.
func (o *offCPU) total(counter int) (uint64, error) {
	perCPU, err := o.perCPU(counter)
	var n uint64
	for _, c := range perCPU {
		n += c
	}
	return n, err
}

// perCPU returns one of the program's per-CPU counters, per CPU.
func (o *offCPU) perCPU(counter int) ([]uint64, error) {
	var perCPU []uint64
	if err := o.objs.OffcpuCounts.Lookup(uint32(counter), &perCPU); err != nil {
		return nil, fmt.Errorf("read off-CPU counters: %w", err)
	}
	return perCPU, nil
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
		}
		st.RunTimeNs += uint64(ps.Runtime)
	}
	var counts [offCPUCounters]uint64
	for i := range counts {
		n, err := o.total(i)
		if err != nil {
			return st, err
		}
		counts[i] = n
	}
	st.Sent, st.Short, st.Cut = counts[offCPUSent], counts[offCPUShort], counts[offCPUCut]
	st.SyscallExits = counts[offCPUExits]
	st.Lost = counts[offCPULost] + counts[offCPUDropped]
	o.mu.Lock()
	st.ExitHookPauses, st.ExitHookSilent = o.pauses, o.silent
	o.mu.Unlock()
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
	s.Comm = commOf(h.Comm)
	s.PC, s.SP, s.FP, s.LR = h.Pc, h.Sp, h.Fp, h.Lr
	return nil
}

// sizeOffCPUScratch gives the off-CPU programs' scratch maps an entry per
// possible CPU, each with room for a stack copy of stackCopy bytes after
// the record's frames.
func sizeOffCPUScratch(spec *ebpf.CollectionSpec, cpus, stackCopy int) {
	for _, name := range []string{"offcpu_scratch", "exit_scratch"} {
		m := spec.Maps[name]
		m.MaxEntries = uint32(cpus)
		if stackCopy > 0 {
			m.ValueSize += uint32(stackCopy)
			m.Key, m.Value = nil, nil
		}
	}
}
