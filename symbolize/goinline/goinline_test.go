package goinline

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/internal/testenv"
)

// tableText is where the entries of the tables table builds count from.
const tableText = 0x1000

// node is an inline tree node for table: the inlined function's name and
// its call site's offset from the function's entry.
type node struct {
	name   string
	parent uint32
}

// run is a stretch of pcs, up to end (an offset from the entry), whose
// inline index is index, another than the run before's (a zero change
// after the first ends the table).
type run struct {
	end   uint64
	index int32
}

// table builds a function table with magic (64-bit, little-endian,
// quantum 1) of one function, main.outer, of size bytes at tableText, whose pcs
// have the inline indexes of runs over the tree nodes, and the funcdata
// that holds the tree at offset 8; index and tree are left out with no
// runs. It returns the table and the funcdata.
func table(magic uint32, size uint32, runs []run, nodes []node) (pcln, funcdata []byte) {
	le := binary.LittleEndian
	l, ok := layoutOf(magic)
	if !ok {
		panic(fmt.Sprintf("no layout for magic %#x", magic))
	}
	names := []byte("main.outer\x00")
	nameOffs := make([]uint32, len(nodes))
	for i, n := range nodes {
		nameOffs[i] = uint32(len(names))
		names = append(append(names, n.name...), 0)
	}
	// pctab: one byte first, since offset 0 means no table.
	pctab := []byte{0}
	indexOff := uint32(0)
	if len(runs) > 0 {
		indexOff = uint32(len(pctab))
		val, pc := int32(-1), uint64(0)
		for _, r := range runs {
			d := r.index - val
			pctab = binary.AppendUvarint(pctab, uint64(uint32(d<<1)^uint32(d>>31)))
			pctab = binary.AppendUvarint(pctab, r.end-pc)
			val, pc = r.index, r.end
		}
		pctab = append(pctab, 0)
	}
	const header = 8 + 8*8
	namesOff := uint64(header)
	pctabOff := namesOff + uint64(len(names))
	pclnOff := pctabOff + uint64(len(pctab))
	// pclntable: the index of 1 function and its end, then the entry:
	// its header, 3 pcdata offsets (the inline index is the third), 4
	// funcdata offsets (the inline tree is the fourth).
	var ptab []byte
	ptab = le.AppendUint32(ptab, 0)
	ptab = le.AppendUint32(ptab, 16)
	ptab = le.AppendUint32(ptab, size)
	ptab = le.AppendUint32(ptab, 0)
	entry := make([]byte, l.funcHeader)
	le.PutUint32(entry[funcNpcdata:], 3)
	entry[l.funcNfuncdata] = 4
	ptab = append(ptab, entry...)
	ptab = le.AppendUint32(ptab, 0)
	ptab = le.AppendUint32(ptab, 0)
	ptab = le.AppendUint32(ptab, indexOff)
	treeOff := uint32(noFuncdata)
	if len(runs) > 0 {
		treeOff = 8
	}
	for _, off := range []uint32{noFuncdata, noFuncdata, noFuncdata, treeOff} {
		ptab = le.AppendUint32(ptab, off)
	}
	pcln = le.AppendUint32(nil, magic)
	pcln = append(pcln, 0, 0, 1, 8)
	for _, w := range []uint64{1, 0, 0, namesOff, pctabOff, pctabOff, pctabOff, pclnOff} {
		pcln = le.AppendUint64(pcln, w)
	}
	pcln = append(append(append(pcln, names...), pctab...), ptab...)
	funcdata = make([]byte, 8)
	for i, n := range nodes {
		b := make([]byte, l.nodeSize)
		le.PutUint32(b[l.nodeNameOff:], nameOffs[i])
		le.PutUint32(b[l.nodeParentPC:], n.parent)
		funcdata = append(funcdata, b...)
	}
	return pcln, funcdata
}

// nested is a function of 0x40 bytes in a table with magic: main.leaf
// inlined into main.mid over [0x10, 0x20), main.mid inlined into
// main.outer over [0x20, 0x30) and around main.leaf's call site, and no
// inlined call elsewhere.
func nested(magic uint32) (pcln, funcdata []byte) {
	return table(magic, 0x40, []run{{0x10, -1}, {0x20, 1}, {0x30, 0}, {0x40, -1}},
		[]node{{"main.mid", 0x08}, {"main.leaf", 0x28}})
}

// TestCalls: both layouts' tables name the same calls.
func TestCalls(t *testing.T) {
	for _, magic := range []uint32{go118Magic, go120Magic} {
		t.Run(fmt.Sprintf("%#x", magic), func(t *testing.T) { testCalls(t, magic) })
	}
}

func testCalls(t *testing.T, magic uint32) {
	pcln, funcdata := nested(magic)
	tab, err := New(pcln, binary.LittleEndian, tableText, funcdata)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off  uint64
		want []Call
	}{
		{0x00, nil},
		{0x0f, nil},
		{0x10, []Call{{"main.leaf", tableText + 0x28}, {"main.mid", tableText + 0x08}}},
		{0x1f, []Call{{"main.leaf", tableText + 0x28}, {"main.mid", tableText + 0x08}}},
		{0x20, []Call{{"main.mid", tableText + 0x08}}},
		{0x3f, nil},
		{0x40, nil}, // past the function
	} {
		got, err := tab.Calls(nil, tableText+c.off)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Calls(%#x) = %v, %v; want %v", c.off, got, err, c.want)
		}
	}
	if got, err := tab.Calls(nil, tableText-1); err != nil || len(got) != 0 {
		t.Errorf("Calls before the table's text = %v, %v; want none", got, err)
	}
	noTree, _ := table(magic, 0x40, nil, nil)
	tab, err = New(noTree, binary.LittleEndian, tableText, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tab.Calls(nil, tableText+0x10); err != nil || len(got) != 0 {
		t.Errorf("Calls in a function without an inline tree = %v, %v; want none", got, err)
	}
}

// TestMalformed: a table that contradicts itself gets an error that says
// where, never a panic or an endless walk.
func TestMalformed(t *testing.T) {
	le := binary.LittleEndian
	l, _ := layoutOf(go120Magic)
	for _, c := range []struct {
		name string
		// edit changes the table of nested, or the funcdata.
		edit func(pcln, funcdata []byte) ([]byte, []byte)
		// newErr: New fails with an error containing it; else Calls
		// at 0x18 does.
		newErr, callsErr string
	}{
		{"Go 1.16's magic", func(p, f []byte) ([]byte, []byte) { le.PutUint32(p, 0xfffffffa); return p, f }, "known inline tree layout", ""},
		{"pointer size", func(p, f []byte) ([]byte, []byte) { p[7] = 3; return p, f }, "pointer size 3 at offset 7", ""},
		{"function count", func(p, f []byte) ([]byte, []byte) { le.PutUint64(p[8:], 1<<40); return p, f }, "1099511627776 functions at offset 8", ""},
		{"funcnametab past the end", func(p, f []byte) ([]byte, []byte) { le.PutUint64(p[8+8*3:], 1<<20); return p, f }, "funcnametab at [0x100000", ""},
		{"truncated", func(p, f []byte) ([]byte, []byte) { return p[:len(p)-8], f }, "", "past pclntable's end"},
		{"tree past funcdata", func(p, f []byte) ([]byte, []byte) { return p, f[:20] }, "", "inline tree node 1 at funcdata offset 0x18 past 20 bytes"},
		{"name past funcnametab", func(p, f []byte) ([]byte, []byte) {
			le.PutUint32(f[8+l.nodeSize+l.nodeNameOff:], 1<<20)
			return p, f
		}, "", "name offset 0x100000 past funcnametab"},
		{"call site before the function", func(p, f []byte) ([]byte, []byte) {
			le.PutUint32(f[8+l.nodeSize+l.nodeParentPC:], 1<<31)
			return p, f
		}, "", "call site -2147483648 before the function"},
		// main.leaf's call site in main.leaf: a node that names itself
		// around itself, as some real programs' do at an entry.
		{"call site in its own node", func(p, f []byte) ([]byte, []byte) {
			le.PutUint32(f[8+l.nodeSize+l.nodeParentPC:], 0x18)
			return p, f
		}, "", "node 1's call site at 0x1018 lies in node 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pcln, funcdata := c.edit(nested(go120Magic))
			tab, err := New(pcln, le, tableText, funcdata)
			if c.newErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.newErr) {
					t.Fatalf("New: %v, want an error containing %q", err, c.newErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			calls, err := tab.Calls(nil, tableText+0x18)
			if err == nil || !strings.Contains(err.Error(), c.callsErr) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Calls: %v, %v; want an error containing %q", calls, err, c.callsErr)
			}
		})
	}
}

// TestAgainstRuntime: for every function of this test's own binary, at
// every 3rd byte, the calls inlined there are the frames the Go runtime
// expands them to (runtime.CallersFrames, which reads the same table from
// memory): the inlined functions' names, innermost first, and each one's
// call site's position (through debug/gosym) the next frame's. The
// runtime names no function whose name lies first in the table (at
// offset 0, which it takes for none): such pcs are not compared. Nor does
// it show a wrapper the compiler generated (a method's for a pointer, a
// deferred call's) around a call inlined into it, which DWARF and the
// table do, and Calls with them.
func TestAgainstRuntime(t *testing.T) {
	tab, lines, pie := ownTables(t)
	// The binary runs where it was loaded: a PIE's addresses move.
	bias := uint64(0)
	if pie {
		self := lines.LookupFunc("github.com/sprof/sprof/symbolize/goinline.TestAgainstRuntime")
		if self == nil {
			t.Fatal("the test's own function is not in the table")
		}
		bias = uint64(runtimeEntry(t)) - self.Entry
	}
	// The funcID of wrappers: that of one.
	w := lines.LookupFunc("internal/abi.(*Kind).String")
	if w == nil {
		t.Fatal("no internal/abi.(*Kind).String, a method wrapper, in the test binary")
	}
	wrapper := funcID(t, tab, w.Entry)
	// CallersFrames expands a pc's inlined calls only while a pc follows
	// it: this one, whose frame ends the list.
	sentinel := runtimeEntry(t) + 2
	pcs, inlined, unknown, nameless, elided, wrong := 0, 0, 0, 0, 0, 0
	var calls []Call
	for _, fn := range lines.Funcs {
		// Not the last byte: CallersFrames would look one past it,
		// in the next function.
		for pc := fn.Entry; pc+1 < fn.End; pc += 3 {
			var err error
			if calls, err = tab.Calls(calls[:0], pc); err != nil {
				unknown++ // the runtime's walk could loop there
				continue
			}
			pcs++
			if len(calls) > 0 {
				inlined++
			}
			// CallersFrames takes return addresses, one past the call.
			frames := runtime.CallersFrames([]uintptr{uintptr(pc + bias + 1), sentinel})
			var want, got []string
			named := true
			for {
				fr, more := frames.Next()
				if fr.PC == sentinel-1 || !more {
					break
				}
				named = named && fr.Function != ""
				want = append(want, fr.Function+"@"+strconv.Itoa(fr.Line))
			}
			if !named {
				nameless++
				continue
			}
			// Past a function's code (its alignment) debug/gosym
			// says line -1, the runtime 0.
			position := func(pc uint64) string {
				_, line, _ := lines.PCToLine(pc)
				return strconv.Itoa(max(line, 0))
			}
			at := position(pc)
			for _, c := range calls {
				got = append(got, c.Function+"@"+at)
				at = position(c.Site)
			}
			got = append(got, fn.Name+"@"+at)
			for i := range got {
				got[i] = nameForPrint(got[i])
			}
			if funcID(t, tab, pc) == wrapper && len(got) == len(want)+1 && slices.Equal(got[:len(want)], want) {
				elided++
				continue
			}
			if !slices.Equal(got, want) {
				if wrong++; wrong <= 10 {
					t.Errorf("%#x: %v, the runtime says %v", pc, got, want)
				}
			}
		}
	}
	t.Logf("%d pcs, %d with inlined calls, %d where they are not known; the runtime names none at %d, and elides the wrapper at %d; %d wrong",
		pcs, inlined, unknown, nameless, elided, wrong)
	if inlined < 1000 || unknown > pcs/1000 || nameless+elided > pcs/100 {
		t.Errorf("%d pcs with inlined calls, %d not known, %d not compared, of %d", inlined, unknown, nameless+elided, pcs)
	}
}

// ownTables returns the inline trees and debug/gosym's table of this
// test's binary, and whether it is a PIE.
func ownTables(t testing.TB) (*Table, *gosym.Table, bool) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return tables(t, exe)
}

// tables returns the inline trees and debug/gosym's table of the Go
// program at path, and whether it is a PIE.
func tables(t testing.TB, path string) (*Table, *gosym.Table, bool) {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcln := f.Section(".gopclntab")
	if pcln == nil {
		t.Fatalf("%s has no .gopclntab", path)
	}
	data, err := pcln.Data()
	if err != nil {
		t.Fatal(err)
	}
	text, ok := elfx.GoText(f, pcln, data)
	if !ok {
		t.Fatalf("%s: no module record", path)
	}
	gofunc, sec, ok := elfx.GoFunc(f, pcln, data)
	if !ok {
		t.Fatalf("%s: GoFunc found nothing", path)
	}
	b, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	funcdata := b[gofunc-sec.Addr:]
	tab, err := New(data, f.ByteOrder, text, funcdata)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		t.Fatal(err)
	}
	return tab, lines, f.Type == elf.ET_DYN
}

// BenchmarkCalls measures a lookup of the calls inlined at a pc, over
// every 16th byte of this test binary's functions (about a fifth of them
// inlined code).
func BenchmarkCalls(b *testing.B) {
	tab, lines, _ := ownTables(b)
	var pcs []uint64
	for _, fn := range lines.Funcs {
		for pc := fn.Entry; pc < fn.End; pc += 16 {
			pcs = append(pcs, pc)
		}
	}
	var calls []Call
	n, found := 0, 0
	for b.Loop() {
		calls, _ = tab.Calls(calls[:0], pcs[n%len(pcs)])
		found += len(calls)
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/lookup")
	b.ReportMetric(float64(found)/float64(n), "calls/lookup")
}

// funcID is the funcID of the function holding pc (runtime._func's).
func funcID(t *testing.T, tab *Table, pc uint64) byte {
	fn, _, ok := tab.function(pc)
	if !ok || uint64(fn)+tab.funcHeader > uint64(len(tab.functab)) {
		t.Fatalf("no function entry for %#x", pc)
	}
	return tab.functab[uint64(fn)+tab.funcHeader-4]
}

// pointerWrapper says whether the function wrapper is the method of a
// pointer type, pkg.(*T).M, that the compiler made for the value method
// method, pkg.T.M.
func pointerWrapper(wrapper, method string) bool {
	i := strings.Index(wrapper, "(*")
	j := strings.Index(wrapper, ").")
	return i >= 0 && j > i && wrapper[:i]+wrapper[i+2:j]+wrapper[j+1:] == method
}

// nameForPrint is name as runtime.Frame names it: the text between its
// first '[' and last ']', a generic function's type arguments, as "...".
func nameForPrint(name string) string {
	i, j := strings.IndexByte(name, '['), strings.LastIndexByte(name, ']')
	if i < 0 || j <= i {
		return name
	}
	return name[:i] + "[...]" + name[j+1:]
}

// runtimeEntry is the entry pc of TestAgainstRuntime where it runs.
func runtimeEntry(t *testing.T) uintptr {
	pc, _, _, ok := runtime.Caller(1)
	if !ok {
		t.Fatal("runtime.Caller found no caller")
	}
	return runtime.FuncForPC(pc).Entry()
}

// FuzzCalls: whatever the table and funcdata, New and Calls return,
// Calls with at most maxDepth calls.
func FuzzCalls(f *testing.F) {
	for _, magic := range []uint32{go118Magic, go120Magic} {
		pcln, funcdata := nested(magic)
		f.Add(pcln, funcdata, uint64(0x18))
		noTree, _ := table(magic, 0x40, nil, nil)
		f.Add(noTree, []byte{}, uint64(0x10))
	}
	f.Fuzz(func(t *testing.T, pcln, funcdata []byte, off uint64) {
		tab, err := New(pcln, binary.LittleEndian, tableText, funcdata)
		if err != nil {
			return
		}
		if calls, _ := tab.Calls(nil, tableText+off%0x100); len(calls) > maxDepth {
			t.Fatalf("%d calls", len(calls))
		}
	})
}

// go119Source is the program TestGo119AgainstDWARF builds: enough of the
// standard library that thousands of its pcs lie in inlined calls.
const go119Source = `package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	words := strings.Fields(strings.Repeat("b a c ", len(os.Args)))
	sort.Strings(words)
	fmt.Println(strings.Join(words, ","), strconv.Quote(os.Args[0]))
}
`

// TestGo119AgainstDWARF: in a program built by Go 1.19 (Debian's), whose
// function table has Go 1.18's layout, at every 3rd byte of every
// function, the calls inlined there are those its DWARF says, as
// llvm-symbolizer reads it: the functions' names, innermost first, then
// the one holding the pc. The runtime of Go 1.19 does not expand a single
// pc (runtime.Callers wrote each inlined call's frame into its list), so
// the compiler's other account of the same inlining is the oracle. Go
// 1.19's DWARF leaves out a value method's call inlined into the wrapper
// the compiler made for its pointer type (runtime.(*lockRank).String
// around runtime.lockRank.String), which the table has: such pcs are not
// compared.
func TestGo119AgainstDWARF(t *testing.T) {
	root := testenv.Go119(t)
	symbolizer := testenv.RequireTool(t, "llvm-symbolizer-22")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "main.go"), filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte(go119Source), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(filepath.Join(root, "bin", "go"), "build", "-o", bin, src)
	build.Dir = dir // outside this module, whose go.mod Go 1.19 cannot read
	build.Env = append(os.Environ(), "GOROOT="+root, "GOFLAGS=", "CGO_ENABLED=0", "GOARCH=amd64", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go 1.19 build: %v\n%s", err, out)
	}
	tab, lines, _ := tables(t, bin)
	if tab.funcHeader != 40 {
		t.Fatalf("Go 1.19's table read with the layout of %d-byte function entries", tab.funcHeader)
	}
	var pcs []uint64
	var in strings.Builder
	for _, fn := range lines.Funcs {
		for pc := fn.Entry; pc < fn.End; pc += 3 {
			pcs = append(pcs, pc)
			fmt.Fprintf(&in, "%#x\n", pc)
		}
	}
	cmd := exec.Command(symbolizer, "--obj="+bin, "--inlines", "--functions=short")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	// One block per pc, a blank line after each: a function's name,
	// then its file and line, per frame.
	blocks := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	if len(blocks) != len(pcs) {
		t.Fatalf("llvm-symbolizer answered %d of %d pcs", len(blocks), len(pcs))
	}
	inlined, unknown, undescribed, elided, wrong := 0, 0, 0, 0, 0
	var calls []Call
	for i, pc := range pcs {
		var want []string
		b := strings.Split(blocks[i], "\n")
		for j := 0; j+1 < len(b); j += 2 {
			want = append(want, nameForPrint(b[j]))
		}
		if len(want) == 0 || want[0] == "??" {
			undescribed++ // no DWARF line for it (alignment, some runtime assembly)
			continue
		}
		if calls, err = tab.Calls(calls[:0], pc); err != nil {
			unknown++
			continue
		}
		if len(calls) > 0 {
			inlined++
		}
		var got []string
		for _, c := range calls {
			got = append(got, nameForPrint(c.Function))
		}
		fn := lines.PCToFunc(pc)
		got = append(got, nameForPrint(fn.Name))
		if n := len(got); n >= 2 && slices.Equal(got[n-1:], want) && pointerWrapper(got[n-1], got[n-2]) {
			elided++
			continue
		}
		if !slices.Equal(got, want) {
			if wrong++; wrong <= 10 {
				t.Errorf("%#x: %v, DWARF says %v", pc, got, want)
			}
		}
	}
	t.Logf("%d pcs, %d with inlined calls, %d where they are not known, %d without DWARF, %d in pointer wrappers; %d wrong",
		len(pcs), inlined, unknown, undescribed, elided, wrong)
	if inlined < 1000 || unknown > len(pcs)/1000 || undescribed+elided > len(pcs)/10 {
		t.Errorf("%d pcs with inlined calls, %d not known, %d not compared, of %d", inlined, unknown, undescribed+elided, len(pcs))
	}
}
