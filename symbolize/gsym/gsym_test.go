package gsym

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

const fixtures = "../../testdata/gsym"

// llvmFiles are GSYM files llvm-gsymutil-22 wrote (scripts/gsym-fixtures.sh).
// icf.llvm.gsym has MergedFunctionsInfo and CallSiteInfo chunks.
var llvmFiles = []string{"cinline.llvm.gsym", "cxx.llvm.gsym", "cxxgcc.llvm.gsym", "gofix.llvm.gsym", "debuglink.llvm.gsym", "icf.llvm.gsym"}

func readFixture(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lookupAll returns the lookup text of every function start, middle and
// end, for comparing two encodings of the same content.
func lookupAll(t testing.TB, r *Reader) []byte {
	var out []byte
	var res LookupResult
	for i := 0; i < r.NumFunctions(); i++ {
		f, err := r.FunctionInfo(i)
		if err != nil {
			t.Fatalf("function %d: %v", i, err)
		}
		for _, a := range []uint64{f.Range.Start, f.Range.Start + f.Range.Size()/2, f.Range.End} {
			if err := r.LookupInto(&res, a); err != nil {
				out = AppendLookupError(out, a, err)
			} else {
				out = res.AppendText(out)
			}
		}
	}
	return out
}

// TestReencodeLLVM decodes each file LLVM wrote and encodes it again: the
// bytes must be identical.
func TestReencodeLLVM(t *testing.T) {
	for _, name := range llvmFiles {
		t.Run(name, func(t *testing.T) {
			orig := readFixture(t, name)
			r, err := NewReader(orig)
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewCreatorFrom(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Finalize(); err != nil {
				t.Fatal(err)
			}
			got, err := c.Encode(EncodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, orig) {
				at := 0
				for at < min(len(got), len(orig)) && got[at] == orig[at] {
					at++
				}
				t.Fatalf("re-encoded %d bytes differ from LLVM's %d bytes at offset %#x", len(got), len(orig), at)
			}
		})
	}
}

// TestTranscode checks that version 2 and big-endian encodings of LLVM's
// files give the same lookups as the originals.
func TestTranscode(t *testing.T) {
	for _, name := range llvmFiles {
		orig, err := NewReader(readFixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		want := lookupAll(t, orig)
		for _, opts := range []EncodeOptions{{Version: 2}, {ByteOrder: binary.BigEndian}, {Version: 2, ByteOrder: binary.BigEndian}} {
			c, err := NewCreatorFrom(orig)
			if err != nil {
				t.Fatal(err)
			}
			c.Finalize()
			b, err := c.Encode(opts)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewReader(b)
			if err != nil {
				t.Fatalf("%s %+v: %v", name, opts, err)
			}
			if r.Header().Version != uint16(max(opts.Version, 1)) || r.Header().ByteOrder != (EncodeOptions{ByteOrder: opts.ByteOrder}).mustOrder() {
				t.Errorf("%s %+v: header %+v", name, opts, r.Header())
			}
			if got := lookupAll(t, r); !bytes.Equal(got, want) {
				t.Errorf("%s %+v: lookups differ from the original's", name, opts)
			}
		}
	}
}

func (o EncodeOptions) mustOrder() binary.ByteOrder {
	b, _ := o.order()
	return b
}

// TestV2Layout checks the version 2 layout against the worked example of
// the GSYM reference (§13): directory entries and total size.
func TestV2Layout(t *testing.T) {
	c := NewCreator()
	c.SetBaseAddress(0)
	c.SetUUID(bytes.Repeat([]byte{0xab}, 20))
	f := c.InsertFile("/src/ex.c")
	c.AddFunction(FunctionInfo{Range: Range{0x1040, 0x1045}, Name: "main", Lines: []LineEntry{{0x1040, f, 15}}})
	c.AddFunction(FunctionInfo{Range: Range{0x1000, 0x1000}, Name: "_init"})
	if _, err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
	b, err := c.Encode(EncodeOptions{Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		typ       uint32
		off, size uint64
	}
	var got []entry
	for at := headerV2Size; ; at += dirEntrySize {
		e := entry{binary.LittleEndian.Uint32(b[at:]), binary.LittleEndian.Uint64(b[at+4:]), binary.LittleEndian.Uint64(b[at+12:])}
		got = append(got, e)
		if e.typ == 0 {
			break
		}
	}
	// Header 20 + 7 directory entries = 160; UUID 20 bytes; two 2-byte
	// offsets; 8-aligned u64 info offsets; file table of 2 files; strings.
	want := []entry{{gdUUID, 160, 20}, {gdAddrOffsets, 180, 4}, {gdAddrInfoOffsets, 184, 16}, {gdFileTable, 200, 36},
		{gdStringTable, 236, uint64(len(c.strs.data))}, {gdFunctionInfo, align(236+uint64(len(c.strs.data)), 4), uint64(len(b)) - align(236+uint64(len(c.strs.data)), 4)}, {}}
	if len(got) != len(want) {
		t.Fatalf("directory %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("directory entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	r, err := NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Lookup(0x1042)
	if err != nil || string(res.AppendText(nil)) != "0x0000000000001042: main + 2 @ /src/ex.c:15\n" {
		t.Errorf("lookup = %q, %v", res.AppendText(nil), err)
	}
}

// TestCorrupt checks that damaged files give FormatErrors naming the field.
func TestCorrupt(t *testing.T) {
	good := readFixture(t, "cinline.llvm.gsym")
	le := binary.LittleEndian
	cases := []struct {
		name, field string
		edit        func(b []byte) []byte
	}{
		{"short", "Magic", func(b []byte) []byte { return b[:3] }},
		{"magic", "Magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", "Version", func(b []byte) []byte { le.PutUint16(b[4:], 7); return b }},
		{"addr size", "AddrOffSize", func(b []byte) []byte { b[6] = 3; return b }},
		{"uuid size", "UUIDSize", func(b []byte) []byte { b[7] = 21; return b }},
		{"header cut", "UUID", func(b []byte) []byte { return b[:40] }},
		{"too many addresses", "AddrOffsets", func(b []byte) []byte { le.PutUint32(b[16:], 1<<30); return b }},
		{"strtab past end", "StringTable", func(b []byte) []byte { le.PutUint32(b[24:], 1<<20); return b }},
	}
	for _, tc := range cases {
		b := tc.edit(bytes.Clone(good))
		_, err := NewReader(b)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want a FormatError for %s", tc.name, err, tc.field)
		}
	}
	// A FunctionInfo offset past the end fails the lookup, not the open.
	b := bytes.Clone(good)
	r, err := NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	addrs := r.Address(0)
	le.PutUint32(b[align(headerV1Size+uint64(r.NumFunctions())*uint64(r.Header().AddrOffSize), 4):], uint32(len(b)+10))
	if _, err := r.Lookup(addrs); err == nil {
		t.Error("lookup through a bad info offset succeeded")
	}
}

// TestNotFound: an address in no function and one its function's line
// table lacks give the sentinels, without allocating, printed as
// llvm-gsymutil prints them.
func TestNotFound(t *testing.T) {
	r, err := NewReader(readFixture(t, "cinline.llvm.gsym"))
	if err != nil {
		t.Fatal(err)
	}
	var res LookupResult
	if allocs := testing.AllocsPerRun(10, func() { err = r.LookupInto(&res, 0) }); err != ErrNotFound || allocs != 0 {
		t.Errorf("lookup(0) = %v with %v allocations, want ErrNotFound and none", err, allocs)
	}
	if got := string(AppendLookupError(nil, 0x10, err)); got != "0x0000000000000010: error: address 0x10 is not in GSYM\n" {
		t.Errorf("printed as %q", got)
	}
	if !errors.Is(ErrNotInLineTable, ErrNotFound) {
		t.Error("ErrNotInLineTable does not match ErrNotFound")
	}
	if got := string(AppendLookupError(nil, 0x1234, ErrNotInLineTable)); got != "0x0000000000001234: error: address 0x1234 is not in the line table\n" {
		t.Errorf("printed as %q", got)
	}
}

func TestClosed(t *testing.T) {
	r, err := Open(filepath.Join(fixtures, "cinline.llvm.gsym"))
	if err != nil {
		t.Fatal(err)
	}
	a := r.Address(0)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(a); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestStreamedMatchesDecoded looks every byte of every function of LLVM's
// files (the first 512 of larger ones) up twice: streamed from the file and from decoded records. The two
// paths must give the same text (the oracle tests in gsym/convert hold the
// answers to llvm-gsymutil's).
func TestStreamedMatchesDecoded(t *testing.T) {
	for _, name := range llvmFiles {
		var out [2][]byte
		for k, promote := range []uint32{1 << 31, 1} {
			r, err := NewReader(readFixture(t, name))
			if err != nil {
				t.Fatal(err)
			}
			r.cache.promote = promote
			var res LookupResult
			for i := 0; i < r.NumFunctions(); i++ {
				f, err := r.FunctionInfo(i)
				if err != nil {
					t.Fatalf("%s: function %d: %v", name, i, err)
				}
				for a := f.Range.Start; a <= f.Range.End && a-f.Range.Start <= 512; a++ {
					if err := r.LookupInto(&res, a); err != nil {
						out[k] = AppendLookupError(out[k], a, err)
					} else {
						out[k] = res.AppendText(out[k])
					}
				}
			}
		}
		if !bytes.Equal(out[0], out[1]) {
			t.Errorf("%s: streamed and decoded lookups differ", name)
		}
		if len(out[0]) == 0 {
			t.Errorf("%s: no lookups", name)
		}
	}
}

// TestIndexMatchesSearch: the address index gives the binary search's
// answer around every entry of a Go fixture's table.
func TestIndexMatchesSearch(t *testing.T) {
	r, err := NewReader(readFixture(t, "gofix.llvm.gsym"))
	if err != nil {
		t.Fatal(err)
	}
	if r.index.first == nil {
		t.Fatal("no index built")
	}
	index := r.index
	for i := 0; i < r.NumFunctions(); i++ {
		for _, off := range []uint64{r.addrOffset(i) - 1, r.addrOffset(i), r.addrOffset(i) + 1, r.addrOffset(i) + 1<<index.shift} {
			r.index = index
			got := r.lowerBound(off)
			r.index = addrIndex{}
			if want := r.lowerBound(off); got != want {
				t.Fatalf("lowerBound(0x%x) = %d through the index, %d by binary search", off, got, want)
			}
		}
	}
}
