package collector

import (
	"slices"
	"strings"
	"testing"
)

const sampleMaps = `5581c8a00000-5581c8a02000 r--p 00000000 08:01 1311 /usr/bin/true
5581c8a02000-5581c8a06000 r-xp 00002000 08:01 1311 /usr/bin/true
5581c9000000-5581c9021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7f1000028000-7f100017d000 r-xp 00028000 08:01 2034 /usr/lib/x86_64-linux-gnu/libc.so.6
7f2000000000-7f2000001000 r-xp 00001000 00:2a 77 /tmp/my app (deleted)
7ffd5c7f0000-7ffd5c7f2000 r-xp 00000000 00:00 0 [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
`

func TestParseMaps(t *testing.T) {
	got, err := parseMaps([]byte(sampleMaps))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapsEntry{
		{0x5581c8a02000, 0x5581c8a06000, 0x2000, "08:01", 1311, "/usr/bin/true", false},
		{0x7f0000000000, 0x7f0000001000, 0, "00:00", 0, "", false},
		{0x7f1000028000, 0x7f100017d000, 0x28000, "08:01", 2034, "/usr/lib/x86_64-linux-gnu/libc.so.6", false},
		{0x7f2000000000, 0x7f2000001000, 0x1000, "00:2a", 77, "/tmp/my app", true},
		{0x7ffd5c7f0000, 0x7ffd5c7f2000, 0, "00:00", 0, "[vdso]", false},
		{0xffffffffff600000, 0xffffffffff601000, 0, "00:00", 0, "[vsyscall]", false},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseMaps:\n got %+v\nwant %+v", got, want)
	}
	// Anonymous code and [vsyscall] name no file to symbolize.
	var files []string
	for _, e := range got {
		if e.symbolizable() {
			files = append(files, e.path)
		}
	}
	if want := []string{"/usr/bin/true", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/tmp/my app", "[vdso]"}; !slices.Equal(files, want) {
		t.Errorf("symbolizable entries %q, want %q", files, want)
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"zz-10 r-xp 0 08:01 1 /x\n", "line 1: bad address range"},
		{"ok\n", "line 1: missing permissions"},
		{"10-20 r-xp 0 08:01 1 /x\n20-10 r-xp 0 08:01 1 /x\n", "line 2: bad address range"},
		{"10-20 r-xp zz 08:01 1 /x\n", "bad offset"},
		{"10-20 r-xp 0 08:01 -1 /x\n", "bad inode"},
		{"10-20 rx 0 08:01 1 /x\n", "bad permissions"},
	} {
		if _, err := parseMaps([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseMaps(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestParseStartTime(t *testing.T) {
	stat := "4242 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 98765 20 21\n"
	if got, err := parseStartTime([]byte(stat)); err != nil || got != 98765 {
		t.Fatalf("parseStartTime = %d, %v; want 98765", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x" + strings.Repeat(" 1", 30)} {
		if _, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("parseStartTime(%q) succeeded", bad)
		}
	}
}

func TestMapSetInsert(t *testing.T) {
	a, b := &binaryFile{name: "/a"}, &binaryFile{name: "/b"}
	s := &mapSet{}
	s.insert(mapping{0x1000, 0x5000, 0, a})
	s.insert(mapping{0x8000, 0x9000, 0, a})
	// A new mapping in the middle splits the old one; the right part
	// keeps pointing at the same file bytes.
	s.insert(mapping{0x2000, 0x3000, 0x100, b})
	want := []mapping{
		{0x1000, 0x2000, 0, a},
		{0x2000, 0x3000, 0x100, b},
		{0x3000, 0x5000, 0x2000, a},
		{0x8000, 0x9000, 0, a},
	}
	if !slices.Equal(s.maps, want) {
		t.Fatalf("maps = %+v, want %+v", s.maps, want)
	}
	for _, tt := range []struct {
		addr uint64
		want *binaryFile
	}{{0xfff, nil}, {0x1000, a}, {0x2fff, b}, {0x3000, a}, {0x5000, nil}, {0x8fff, a}, {0x9000, nil}} {
		m := s.find(tt.addr)
		if (m == nil) != (tt.want == nil) || m != nil && m.bin != tt.want {
			t.Errorf("find(%#x) = %+v, want file %v", tt.addr, m, tt.want)
		}
	}
}

// TestMapSetHasCode: code of no file described as a range is still there
// while the set has such code over all of the range, merged with its
// neighbours or not; a file's mapping is still there from the same start
// with the same binary.
func TestMapSetHasCode(t *testing.T) {
	bin := &binaryFile{name: "/bin/app"}
	s := &mapSet{}
	s.insert(mapping{start: 0x400000, limit: 0x500000, bin: bin})
	s.insertAnon(codeRange{0x7f0000000000, 0x7f0000030000})
	for _, tc := range []struct {
		d    mapping
		want bool
	}{
		{mapping{start: 0x7f0000000000, limit: 0x7f0000030000}, true},
		{mapping{start: 0x7f0000010000, limit: 0x7f0000020000}, true},
		{mapping{start: 0x7f0000020000, limit: 0x7f0000040000}, false},
		{mapping{start: 0x7effffff0000, limit: 0x7f0000010000}, false},
		{mapping{start: 0x400000, limit: 0x500000, bin: bin}, true},
		{mapping{start: 0x400000, limit: 0x500000, bin: &binaryFile{name: "/bin/other"}}, false},
		{mapping{start: 0x401000, limit: 0x500000, bin: bin}, false},
	} {
		if got := s.has(tc.d); got != tc.want {
			t.Errorf("has [%#x, %#x) of %v: %v, want %v", tc.d.start, tc.d.limit, tc.d.bin, got, tc.want)
		}
	}
}
