// Package goruntime reads from a Go executable what a stack walk needs to
// follow runtime.morestack back to the goroutine whose stack grows: where
// morestack lies, where the thread's current g is kept, and the offsets
// of the runtime's g, m and gobuf fields; and where the functions lie that
// the program's stacks begin in.
//
// Go's morestack, called from a function's prologue when its goroutine's
// stack is too small, saves the function's context in g.sched, switches
// to the thread's g0 stack and clears the frame pointer before calling
// newstack, so a frame-pointer walk of a sample taken while the stack
// grows ends at morestack. Go's own traceback goes on at
// g.m.curg.sched; so can a sampler that knows these offsets:
//
//	g      = the thread's g (amd64: at TLSG from the thread pointer; arm64: R28)
//	m      = *(g + GM), and g must be *(m + MG0), or *(m + MGsignal) when a
//	         signal handler interrupted newstack
//	curg   = *(m + MCurg), and *(curg + GM) must be m
//	frames = curg.sched.pc; the caller's return address (amd64: the word at
//	         curg.sched.sp; arm64: curg.sched.lr); then the frame
//	         pointers from curg.sched.bp, within curg.stack
package goruntime

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sprof/sprof/internal/elfx"
)

// ErrNotGo is returned for a binary that is not a Go program.
var ErrNotGo = errors.New("not a Go program")

// ErrUnsupported is wrapped by the error for a Go binary whose goroutines
// cannot be found from a sample: a shared object (its g lies in dynamic
// TLS), a thread-local layout the linker left no symbol for, or a Go
// version whose structure layout is neither in DWARF nor known here.
var ErrUnsupported = errors.New("goroutine not found from samples")

// Layout holds byte offsets into the runtime's structures.
type Layout struct {
	GStack, GM, GSched   uint64 // in runtime.g: stack (lo, hi), m, sched
	MG0, MGsignal, MCurg uint64 // in runtime.m
	// In runtime.gobuf.
	GobufSP, GobufPC, GobufLR, GobufBP uint64
}

// Runtime is what a sampler needs to follow morestack in one Go
// executable.
type Runtime struct {
	// Version is the toolchain that built the binary (go1.26.8).
	Version string
	// Morestack is where runtime.morestack and runtime.morestack_noctxt
	// lie (see Code).
	Morestack Range
	// TLSG is, on amd64, the offset of the thread's g from the thread
	// pointer (fsbase). arm64 keeps g in R28 in Go code.
	TLSG   int64
	Layout Layout
	// LayoutFrom says where Layout came from: "DWARF" (the binary's
	// own) or "table" (known for Version, checked against DWARF of
	// binaries built by that toolchain).
	LayoutFrom string
}

// maxPclntab bounds the Go function table ReadCode parses: a very large
// Go binary's is tens of MiB.
const maxPclntab = 256 << 20

// maxDWARFEntries bounds the DWARF entries Runtime visits looking for
// the runtime's types: they lie in the runtime's compile unit, among the
// first.
const maxDWARFEntries = 1 << 22

// Range is [Start, End) in a binary's virtual addresses.
type Range struct{ Start, End uint64 }

// Code is where the functions lie, in a Go executable, that a walk of its
// stacks must know by address. Both come from the Go function table
// (.gopclntab, which stripping leaves, counted from elfx.GoText).
type Code struct {
	// Morestack is runtime.morestack, with runtime.morestack_noctxt where
	// that follows it, as it does in the runtime's assembly for amd64 and
	// arm64: the prologue of every function without a closure context
	// calls morestack_noctxt, whose two instructions jump to morestack,
	// and a sample in either is taken before the growing function has a
	// frame (the frame pointer still names its caller's record), which
	// the walk must know as a sample in morestack.
	Morestack Range
	// Roots are the functions a stack of the program begins in, which a
	// frame-pointer walk may find with no frame record at all and still
	// whole: runtime.goexit, every goroutine's; and where the kernel
	// enters the program at Go's own start code (linked internally, with
	// no C start code before it), that code (_rt0_<arch>_linux and the
	// _rt0_<arch> it jumps to) and runtime.rt0_go it jumps to in turn;
	// and there, unless the program uses cgo (has crosscall2), whose
	// threads pthread_create starts, runtime.mstart, where the runtime's
	// threads begin (the first called from rt0_go, which keeps no frame
	// record, the others by runtime.clone), and clone, which a new thread
	// returns from the system call into with its parent's frame pointer
	// (its one frame, sampled there, is the whole stack). These are where
	// Go's own traceback stops (the runtime marks goexit, rt0_go and
	// mstart TOPFRAME), less runtime.sigtramp, under which lies the code
	// the signal interrupted. In a program a C start calls, a thread's
	// first Go frames have C callers, and only goexit is a root.
	Roots []Range
}

// ReadCode returns where f's code lies that a walk must know (see Code);
// the error wraps ErrNotGo for a binary that is not a Go program.
func ReadCode(f *elf.File) (*Code, error) {
	pcln := f.Section(".gopclntab")
	if pcln == nil {
		pcln = f.Section(".data.rel.ro.gopclntab")
	}
	if pcln == nil || f.Section(".text") == nil {
		return nil, ErrNotGo
	}
	if pcln.Size > maxPclntab {
		return nil, fmt.Errorf("go function table of %d bytes, more than %d", pcln.Size, maxPclntab)
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("go function table: %w", err)
	}
	text, _ := elfx.GoText(f, pcln, data)
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil, fmt.Errorf("go function table: %w", err)
	}
	var c Code
	fn := tab.LookupFunc("runtime.morestack")
	if fn == nil || fn.End <= fn.Entry {
		return nil, fmt.Errorf("%w: no runtime.morestack", ErrNotGo)
	}
	c.Morestack = Range{fn.Entry, fn.End}
	if next := tab.LookupFunc("runtime.morestack_noctxt"); next != nil && next.Entry == fn.End && next.End > next.Entry {
		c.Morestack.End = next.End
	}
	roots := []string{"runtime.goexit"}
	if entry := tab.PCToFunc(f.Entry); entry != nil && strings.HasPrefix(entry.Name, "_rt0_") {
		roots = append(roots, entry.Name, "runtime.rt0_go")
		switch f.Machine {
		case elf.EM_X86_64:
			roots = append(roots, "_rt0_amd64")
		case elf.EM_AARCH64:
			roots = append(roots, "_rt0_arm64")
		}
		if tab.LookupFunc("crosscall2") == nil {
			roots = append(roots, "runtime.mstart", "runtime.clone")
		}
	}
	for _, name := range roots {
		if fn := tab.LookupFunc(name); fn != nil && fn.End > fn.Entry {
			c.Roots = append(c.Roots, Range{fn.Entry, fn.End})
		}
	}
	return &c, nil
}

// Runtime returns what to follow morestack with in f, whose code c is,
// read through r (the same file; for its build info). The error wraps
// ErrUnsupported where the goroutine cannot be found.
func (c *Code) Runtime(f *elf.File, r io.ReaderAt) (*Runtime, error) {
	rt := Runtime{Morestack: c.Morestack}
	var err error
	switch f.Machine {
	case elf.EM_X86_64:
		if rt.TLSG, err = tlsG(f); err != nil {
			return nil, err
		}
	case elf.EM_AARCH64:
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, f.Machine)
	}
	if f.Type != elf.ET_EXEC && !hasInterp(f) {
		return nil, fmt.Errorf("%w: a shared object", ErrUnsupported)
	}
	if bi, err := buildinfo.Read(r); err == nil {
		rt.Version = bi.GoVersion
	}
	if l, err := dwarfLayout(f); err == nil {
		rt.Layout, rt.LayoutFrom = l, "DWARF"
		return &rt, nil
	}
	l, ok := known(rt.Version, f.Machine)
	if !ok {
		return nil, fmt.Errorf("%w: no DWARF, and no layout known for %q", ErrUnsupported, rt.Version)
	}
	rt.Layout, rt.LayoutFrom = l, "table"
	return &rt, nil
}

func hasInterp(f *elf.File) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

// tlsG returns where amd64 Go code keeps g: runtime.tlsg's offset in the
// executable's TLS block, which on x86-64 (TLS variant II) ends at the
// thread pointer. The Go linker, linking internally, writes no TLS
// segment and uses -8, the slot its own settls points the thread pointer
// past; an external linker places runtime.tlsg among the program's other
// thread-locals. Without a symbol table, only a TLS segment that holds
// nothing but runtime.tlsg's 8 bytes says where it is.
func tlsG(f *elf.File) (int64, error) {
	var tls *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			tls = p
		}
	}
	if tls == nil {
		return -8, nil
	}
	align := max(tls.Align, 1)
	if align&(align-1) != 0 || align > 1<<20 || tls.Memsz > 1<<30 {
		return 0, fmt.Errorf("%w: TLS segment of %d bytes aligned to %d", ErrUnsupported, tls.Memsz, tls.Align)
	}
	block := (tls.Memsz + align - 1) &^ (align - 1)
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == "runtime.tlsg" && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			if s.Value+8 > tls.Memsz {
				return 0, fmt.Errorf("%w: runtime.tlsg at %d outside the TLS segment's %d bytes", ErrUnsupported, s.Value, tls.Memsz)
			}
			return int64(s.Value) - int64(block), nil
		}
	}
	if tls.Memsz == 8 {
		return -int64(block), nil
	}
	return 0, fmt.Errorf("%w: no runtime.tlsg symbol among %d bytes of thread-locals", ErrUnsupported, tls.Memsz)
}

// field names a structure member dwarfLayout looks for.
type field struct {
	typ, name string
	at        *uint64
}

func (l *Layout) fields() []field {
	return []field{
		{"runtime.g", "stack", &l.GStack},
		{"runtime.g", "m", &l.GM},
		{"runtime.g", "sched", &l.GSched},
		{"runtime.m", "g0", &l.MG0},
		{"runtime.m", "gsignal", &l.MGsignal},
		{"runtime.m", "curg", &l.MCurg},
		{"runtime.gobuf", "sp", &l.GobufSP},
		{"runtime.gobuf", "pc", &l.GobufPC},
		{"runtime.gobuf", "lr", &l.GobufLR},
		{"runtime.gobuf", "bp", &l.GobufBP},
	}
}

// dwarfLayout reads Layout from f's DWARF.
func dwarfLayout(f *elf.File) (Layout, error) {
	var l Layout
	// Only the sections type entries need: f.DWARF would decompress and
	// check the line and location tables too, several times the work.
	var sections [4][]byte
	for i, name := range []string{".debug_abbrev", ".debug_info", ".debug_str", ".debug_addr"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			data, err := s.Data()
			if err != nil {
				return l, fmt.Errorf("%s: %w", name, err)
			}
			sections[i] = data
		}
	}
	if sections[1] == nil {
		return l, errors.New("no DWARF")
	}
	d, err := dwarf.New(sections[0], nil, nil, sections[1], nil, nil, nil, sections[2])
	if err != nil {
		return l, err
	}
	if sections[3] != nil {
		if err := d.AddSection(".debug_addr", sections[3]); err != nil {
			return l, err
		}
	}
	want := map[string]map[string]*uint64{}
	for _, fl := range l.fields() {
		if want[fl.typ] == nil {
			want[fl.typ] = map[string]*uint64{}
		}
		want[fl.typ][fl.name] = fl.at
	}
	found := map[string]bool{}
	r := d.Reader()
	for n := 0; n < maxDWARFEntries && len(found) < len(want); n++ {
		e, err := r.Next()
		if err != nil {
			return l, err
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		members := want[name]
		if e.Tag != dwarf.TagStructType || members == nil || found[name] {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		got := 0
		for e.Children {
			m, err := r.Next()
			if err != nil {
				return l, err
			}
			if m == nil || m.Tag == 0 {
				break
			}
			mname, _ := m.Val(dwarf.AttrName).(string)
			off, ok := m.Val(dwarf.AttrDataMemberLoc).(int64)
			if at := members[mname]; at != nil && ok && off >= 0 {
				*at = uint64(off)
				got++
			}
			if m.Children {
				r.SkipChildren()
			}
		}
		if got != len(members) {
			return l, fmt.Errorf("DWARF %s: %d of its members %s", name, got, strings.Join(keys(members), ", "))
		}
		found[name] = true
	}
	if len(found) < len(want) {
		return l, fmt.Errorf("DWARF: %d of the runtime's structures g, m and gobuf", len(found))
	}
	return l, nil
}

func keys(m map[string]*uint64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// known is the layout of go1.26 on linux, the same on amd64 and arm64,
// for binaries without DWARF (-ldflags=-w or -s); TestKnownLayouts checks
// it against the DWARF of binaries the installed toolchain builds. Other
// versions without DWARF are not followed.
func known(version string, machine elf.Machine) (Layout, bool) {
	if machine != elf.EM_X86_64 && machine != elf.EM_AARCH64 {
		return Layout{}, false
	}
	switch {
	case strings.HasPrefix(version, "go1.26.") || version == "go1.26":
		return Layout{GStack: 0, GM: 48, GSched: 56, MG0: 0, MGsignal: 72, MCurg: 184,
			GobufSP: 0, GobufPC: 8, GobufLR: 32, GobufBP: 40}, true
	}
	return Layout{}, false
}
