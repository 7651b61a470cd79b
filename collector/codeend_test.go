package collector

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/collector/perfring"
	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/internal/testenv"
)

// TestCutAtData: a frame-pointer walk from the kernel that reaches a
// return address in no executable mapping of its process (data, as
// 0x8000000001 in a g++ stack) ends there: the frames before it are kept,
// the stack is marked truncated in the profile and in what a Sink records,
// and two such samples are one stack. Code of no file (a JIT's, from the
// side band or from /proc) is executable; a return address is judged at
// its call, so one at the very end of a mapping is kept; and a process
// whose mappings are not known, or do not hold even its PC, keeps its
// stack whole.
func TestCutAtData(t *testing.T) {
	proc := newFakeProc(t)
	proc.set(20, 7, 0x1000, 0x3000, "/app")
	maps, err := os.OpenFile(filepath.Join(proc.root, "20", "maps"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(maps, "%x-%x rwxp 00000000 00:00 0 \n", 0x70000, 0x80000) // JIT code, as /proc shows it
	maps.Close()

	sink := &logSink{}
	c, err := New(Options{Frequency: 99, ProcRoot: proc.root, NoSideband: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.events = []event{mmapEvent(1, 10, 0x1000, 0x3000, 0, "/app", []byte{0xaa})}
	c.copyRecord(&perfring.Record{Type: perfring.RecordMmap2, Time: 1, Pid: 10, Tid: 10,
		Addr: 0x50000, Len: 0x10000, Prot: unix.PROT_READ | unix.PROT_EXEC, Filename: []byte("//anon")})

	const data = 0x80_0000_0001
	src := &fakeSource{}
	for _, s := range []struct {
		pid  uint32
		user []uint64
	}{
		{10, []uint64{0x1000, 0x2000, data, 0x2000}},  // cut after 2 frames
		{10, []uint64{0x1000, 0x2000, data, 0x2100}},  // the same stack once cut
		{10, []uint64{0x1000, 0x50010, 0x2000}},       // JIT code from the side band
		{10, []uint64{0x1000, 0x3000}},                // a call at the mapping's end
		{10, []uint64{0x9000, data}},                  // the PC in no known mapping
		{20, []uint64{0x1000, 0x70010, data, 0x2000}}, // JIT code from /proc, then data
		{30, []uint64{0x1000, data}},                  // a process sprof cannot read
	} {
		src.add(s.pid, 10, s.user...)
	}
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}

	type stack struct {
		pid       uint32
		user      string
		truncated bool
		count     int64
	}
	var got []stack
	for _, s := range c.Profile().Samples {
		var user []uint64
		for _, l := range s.Stack {
			user = append(user, l.Address)
		}
		got = append(got, stack{s.Pid, fmt.Sprintf("%x", user), s.Truncated, s.Count})
	}
	want := []stack{
		{10, "[1000 2000]", true, 2},
		{10, "[1000 50010 2000]", false, 1},
		{10, "[1000 3000]", false, 1},
		{10, fmt.Sprintf("[9000 %x]", data), false, 1},
		{20, "[1000 70010]", true, 1},
		{30, fmt.Sprintf("[1000 %x]", data), false, 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("profile stacks\n%+v\nwant\n%+v", got, want)
	}
	var recorded []string
	for _, l := range sink.log {
		if _, sample, ok := strings.Cut(l, " sample "); ok {
			recorded = append(recorded, sample)
		}
	}
	wantRecorded := []string{
		"10/10 cpu0 p10 [1000 2000] [] true",
		"10/10 cpu0 p10 [1000 2000] [] true",
		"10/10 cpu0 p10 [1000 50010 2000] [] false",
		"10/10 cpu0 p10 [1000 3000] [] false",
		fmt.Sprintf("10/10 cpu0 p10 [9000 %x] [] false", data),
		"20/20 cpu0 p20 [1000 70010] [] true",
		fmt.Sprintf("30/30 cpu0 p30 [1000 %x] [] false", data),
	}
	if !slices.Equal(recorded, wantRecorded) {
		t.Errorf("the Sink recorded\n%q\nwant\n%q", recorded, wantRecorded)
	}
}

// TestMorestackMarksTruncated: a walk of a Go program that ends in
// runtime.morestack (which clears the frame pointer before it runs
// newstack on g0) is marked truncated, one that ends in runtime.goexit,
// a goroutine's true root, is not, and neither is one of a binary that
// is not Go. A Go program's stack of the sampled pc alone (newstack's
// entry, before it sets its frame pointer) is marked too, unless the pc
// is in a root (goexit; the start code the kernel enters the program at,
// and rt0_go it jumps to; mstart and clone where the program does not use
// cgo), even where the walk said it was not whole;
// another program's is not. A walk that went on through morestack without following
// the goroutine (Sample.Goroutine false: sampled in morestack or in
// morestack_noctxt, which jumps there, or on arm64 in runtime.save_g,
// whose caller's frame pointer skips frames) is cut after morestack's
// frame and marked; a followed one is whole. The Go program is
// this test's own binary, stripped as go test links it (internally, or
// with -ldflags=-linkmode=external); its functions are found in its
// function table by debug/gosym, counted from elfx.GoText.
func TestMorestackMarksTruncated(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	pcln, err := ef.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	text, _ := elfx.GoText(ef, ef.Section(".gopclntab"), pcln)
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, text))
	if err != nil {
		t.Fatal(err)
	}
	fileOffset := func(name string) uint64 {
		t.Helper()
		fn := tab.LookupFunc(name)
		if fn == nil {
			t.Fatalf("%s has no %s", exe, name)
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && fn.Entry >= p.Vaddr && fn.Entry < p.Vaddr+p.Filesz {
				return fn.Entry - p.Vaddr + p.Off
			}
		}
		t.Fatalf("%s at %#x is in no executable segment", name, fn.Entry)
		return 0
	}
	morestack, goexit, newstack := fileOffset("runtime.morestack"), fileOffset("runtime.goexit"), fileOffset("runtime.newstack")
	noctxt := fileOffset("runtime.morestack_noctxt")
	rt0go, mstart, clone := fileOffset("runtime.rt0_go"), fileOffset("runtime.mstart"), fileOffset("runtime.clone")
	// The start code is a root where the kernel enters the program there
	// (go test links internally; linked externally, C's start code comes
	// first and the test takes another pc of rt0_go for it); mstart and
	// clone where, besides, it has no cgo.
	entry := tab.PCToFunc(ef.Entry)
	goStart := entry != nil && strings.HasPrefix(entry.Name, "_rt0_")
	cgo := tab.LookupFunc("crosscall2") != nil
	start := rt0go + 12
	if goStart {
		start = fileOffset(entry.Name)
	}

	const lo, hi = 0x1000_0000, 0x2000_0000
	proc := newFakeProc(t)
	proc.set(40, 7, lo, hi, exe)
	proc.set(41, 7, lo, hi, testenv.RequireTool(t, "true")) // not Go
	c, err := New(Options{Frequency: 99, ProcRoot: proc.root, NoSideband: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := &fakeSource{}
	src.add(40, 10, lo+goexit, lo+morestack+5)
	src.add(40, 10, lo+goexit, lo+goexit+5)
	src.add(41, 10, lo+goexit, lo+morestack+5)
	src.add(40, 10, lo+newstack)
	src.add(41, 10, lo+newstack)
	src.add(40, 10, lo+newstack+2, lo+morestack+5, lo+newstack+9, lo+goexit+5)
	src.add(40, 10, lo+morestack+1, lo+newstack+9, lo+goexit+5)
	src.add(41, 10, lo+morestack+1, lo+newstack+9, lo+goexit+5)
	src.add(40, 10, lo+noctxt, lo+newstack+9, lo+goexit+5)
	src.add(40, 10, lo+newstack+3, lo+morestack+5, lo+newstack+9, lo+goexit+5)
	src.samples[len(src.samples)-1].Goroutine = true
	src.add(40, 10, lo+goexit+1)
	src.add(40, 10, lo+start)
	src.add(40, 10, lo+rt0go+4)
	src.add(40, 10, lo+mstart)
	src.add(40, 10, lo+clone+2)
	src.samples[len(src.samples)-1].UserTruncated = true // the parent's frame pointer refused
	src.add(40, 10, lo+rt0go+8)
	src.samples[len(src.samples)-1].UserTruncated = true
	src.add(40, 10, lo+newstack+1)
	src.samples[len(src.samples)-1].UserTruncated = true
	if err := c.Drain(src); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range c.Profile().Samples {
		var user []uint64
		for _, l := range s.Stack {
			user = append(user, l.Address-lo)
		}
		got = append(got, fmt.Sprintf("%d %x %v", s.Pid, user, s.Truncated))
	}
	want := []string{
		fmt.Sprintf("40 [%x %x] true", goexit, morestack+5),
		fmt.Sprintf("40 [%x %x] false", goexit, goexit+5),
		fmt.Sprintf("41 [%x %x] false", goexit, morestack+5),
		fmt.Sprintf("40 [%x] true", newstack),
		fmt.Sprintf("41 [%x] false", newstack),
		fmt.Sprintf("40 [%x %x] true", newstack+2, morestack+5),
		fmt.Sprintf("40 [%x] true", morestack+1),
		fmt.Sprintf("41 [%x %x %x] false", morestack+1, newstack+9, goexit+5),
		fmt.Sprintf("40 [%x] true", noctxt),
		fmt.Sprintf("40 [%x %x %x %x] false", newstack+3, morestack+5, newstack+9, goexit+5),
		fmt.Sprintf("40 [%x] false", goexit+1),
		fmt.Sprintf("40 [%x] %v", start, !goStart),
		fmt.Sprintf("40 [%x] %v", rt0go+4, !goStart),
		fmt.Sprintf("40 [%x] %v", mstart, !goStart || cgo),
		fmt.Sprintf("40 [%x] %v", clone+2, !goStart || cgo),
		fmt.Sprintf("40 [%x] %v", rt0go+8, !goStart),
		fmt.Sprintf("40 [%x] true", newstack+1),
	}
	if !slices.Equal(got, want) {
		t.Errorf("stacks (addresses less the mapping's start)\n%q\nwant\n%q", got, want)
	}
}
