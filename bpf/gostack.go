package bpf

import (
	"fmt"
	"math"

	"github.com/sprof/sprof/unwind/goruntime"
)

// GoProcess says how the walk finds the goroutine of a Go process whose
// stack grows (sprof.bpf.c, follow_goroutine).
type GoProcess struct {
	// MorestackStart and MorestackEnd are where the process has
	// runtime.morestack and morestack_noctxt (goruntime.Code),
	// [start, end) in its address space.
	MorestackStart, MorestackEnd uint64
	// TLSG and Layout are the executable's (goruntime.Runtime).
	TLSG   int64
	Layout goruntime.Layout
}

// SetGo has the walks of process pid's samples that end in
// runtime.morestack go on at the goroutine whose stack grows, found as p
// says; a nil p stops that. The caller removes the mark when the process
// exits or execs: a stale one is only a range whose walks end in reads
// that fail their checks.
func (s *Sampler) SetGo(pid uint32, p *GoProcess) error {
	var err error
	if p == nil {
		err = s.forgetProcess(s.objs.GoProcs, markGo, pid)
	} else {
		var v sprofGoProc
		if v, err = goProc(p); err == nil {
			err = s.describeProcess(s.objs.GoProcs, markGo, pid, &v)
		}
	}
	if err != nil {
		return fmt.Errorf("goroutines of pid %d: %w", pid, err)
	}
	return nil
}

// goProc is p as sprof.bpf.c's struct go_proc.
func goProc(p *GoProcess) (sprofGoProc, error) {
	l := &p.Layout
	if p.MorestackEnd <= p.MorestackStart {
		return sprofGoProc{}, fmt.Errorf("runtime.morestack at [%#x, %#x)", p.MorestackStart, p.MorestackEnd)
	}
	var err error
	off := func(name string, o uint64) uint16 {
		if o > math.MaxUint16 && err == nil {
			err = fmt.Errorf("go runtime layout: %s at offset %d", name, o)
		}
		return uint16(o)
	}
	return sprofGoProc{
		MorestackStart: p.MorestackStart,
		MorestackEnd:   p.MorestackEnd,
		TlsG:           p.TLSG,
		G_stack:        off("g.stack", l.GStack),
		G_m:            off("g.m", l.GM),
		G_sched:        off("g.sched", l.GSched),
		M_g0:           off("m.g0", l.MG0),
		M_gsignal:      off("m.gsignal", l.MGsignal),
		M_curg:         off("m.curg", l.MCurg),
		GobufSp:        off("gobuf.sp", l.GobufSP),
		GobufPc:        off("gobuf.pc", l.GobufPC),
		GobufLr:        off("gobuf.lr", l.GobufLR),
		GobufBp:        off("gobuf.bp", l.GobufBP),
	}, err
}
