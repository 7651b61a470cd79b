package cbf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// T is the start of most CIF vectors in cbf.md §3.5: info byte 02 and the
// platform "test".
const T = "02 04 74 65 73 74 "

func seq(from, to byte) []byte {
	var b []byte
	for c := from; c <= to; c++ {
		b = append(b, c)
	}
	return b
}

// wholeMap is the 180-byte map Swift 6.2.3 decodes and re-encodes
// identically (cbf.md §3.5).
const wholeMap = `02264c696e7578202844656269616e20474e552f4c696e75782031322028626f6f6b776f726d29290329555555554000
2000140102030405060708090a0b0c0d0e0f10111213140d2f686f6d652f752f612e6f7574002a7ffff7c00000195000
142122232425262728292a2b2c2d2e2f3031323334811b2f7838365f36342d6c696e75782d676e752f6c6962632e736f
2e3600923c300002c0000081a2152f6c642d6c696e75782d7838362d36342e736f2e3200`

func wholeMapImages() []Image {
	return []Image{
		{Name: "a.out", Path: "/home/u/a.out", BuildID: seq(0x01, 0x14), Base: 0x555555554000, EndOfText: 0x555555556000},
		{Name: "libc.so.6", Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: seq(0x21, 0x34), Base: 0x7ffff7c00000, EndOfText: 0x7ffff7d95000},
		{Name: "ld-linux-x86-64.so.2", Path: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", Base: 0x7ffff7fc3000, EndOfText: 0x7ffff7fef000},
	}
}

func TestCIFWholeMap(t *testing.T) {
	src := unhex(t, wholeMap)
	m, n, err := DecodeImageMap(src)
	if err != nil || n != len(src) {
		t.Fatalf("decode: %d of %d bytes, %v", n, len(src), err)
	}
	want, err := NewImageMap("Linux (Debian GNU/Linux 12 (bookworm))", Word64, wholeMapImages())
	if err != nil {
		t.Fatal(err)
	}
	if !m.Equal(want) {
		t.Errorf("decoded\n%v\nwant\n%v", m, want)
	}
	if got := want.AppendCIF(nil); !slices.Equal(got, src) {
		t.Errorf("encoded\n%x\nwant\n%x", got, src)
	}
}

// TestCIFVectors decodes the vectors of cbf.md §3.5 and checks Swift's
// re-encodings of them.
func TestCIFVectors(t *testing.T) {
	deep := ""
	for c := 'A'; c <= 'Z'; c++ {
		deep += "/" + string(c)
	}
	for c := 'a'; c <= 'n'; c++ {
		deep += "/" + string(c)
	}
	for _, c := range []struct {
		name, hex string
		platform  string
		images    []Image
		reencoded string // Swift's encoding of the decoded map, when it differs
	}{
		{"1", "02 06 6d61636f7378 01 39 0000555500001000 2000 04 deadbeef 15 2f7573722f6c69622f6c6962666f6f2e64796c6962 00",
			"macosx", []Image{{Path: "/usr/lib/libfoo.dylib", BuildID: []byte{0xde, 0xad, 0xbe, 0xef}, Base: 0x555500001000, EndOfText: 0x555500003000}},
			"02 06 6d61636f7378 01 29 555500001000 2000 04 deadbeef 81 80 09 666f6f2e64796c6962 00"},
		{"2", T + "01 09 1000 0100 00 00", "test", []Image{{Base: 0x1000, EndOfText: 0x1100}}, ""},
		{"3", T + "01 09 1000 0100 00 80 0a 2f6c69626261722e736f 00", "test",
			[]Image{{Path: "/lib/libbar.so", Base: 0x1000, EndOfText: 0x1100}},
			T + "01 09 1000 0100 00 80 80 06 6261722e736f 00"},
		{"4", T + "02 09 1000 0100 00 1d 2f73776966742f6c696e75782f7838365f36342f6c6962666f6f2e736f 00 89 0100 0100 00 a1 0a 2f6c69626261722e736f 00",
			"test", []Image{{Path: "/swift/linux/x86_64/libfoo.so", Base: 0x1000, EndOfText: 0x1100},
				{Path: "/swift/linux/libbar.so", Base: 0x1100, EndOfText: 0x1200}},
			T + "02 09 1000 0100 00 1d 2f73776966742f6c696e75782f7838365f36342f6c6962666f6f2e736f 00 09 1100 0100 00 a1 80 06 6261722e736f 00"},
		{"5", T + "01 09 1000 0100 00 84 45 43 4170704b6974", "test",
			[]Image{{Path: "/System/Library/Frameworks/AppKit.framework/Versions/C/AppKit", Base: 0x1000, EndOfText: 0x1100}}, ""},
		{"5.1", T + "01 09 1000 0100 00 84 48 01 494f53757266616365", "test",
			[]Image{{Path: "/System/Library/Frameworks/IOSurface.framework/IOSurface", Base: 0x1000, EndOfText: 0x1100}},
			""},
		{"6", T + "02 09 1000 0100 00 3f" + fmt.Sprintf("%x", deep[:63]) + " 11" + fmt.Sprintf("%x", deep[63:]) +
			" 00 89 0100 0100 00 c0 00 09 2f65787472612e736f 00", "test",
			[]Image{{Path: deep, Base: 0x1000, EndOfText: 0x1100}, {Path: deep[:66] + "/extra.so", Base: 0x1100, EndOfText: 0x1200}},
			T + "02 09 1000 0100 00 3f" + fmt.Sprintf("%x", deep[:63]) + " 11" + fmt.Sprintf("%x", deep[63:]) +
				" 00 09 1100 0100 00 c0 00 09 2f65787472612e736f 00"},
	} {
		src := unhex(t, c.hex)
		got, n, err := DecodeImageMap(src)
		if err != nil || n != len(src) {
			t.Errorf("vector %s: decode: %d of %d bytes, %v", c.name, n, len(src), err)
			continue
		}
		want, err := NewImageMap(c.platform, Word64, c.images)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want) {
			t.Errorf("vector %s: decoded\n%v\nwant\n%v", c.name, got, want)
		}
		reenc := c.reencoded
		if reenc == "" {
			reenc = c.hex
		}
		if enc := want.AppendCIF(nil); !slices.Equal(enc, unhex(t, reenc)) {
			t.Errorf("vector %s: encoded\n% x\nwant\n% x", c.name, enc, unhex(t, reenc))
		}
	}
}

func TestCIFMustFail(t *testing.T) {
	for _, c := range []string{
		"", "04", "03", "02",
		"02 05 41 42",
		"02 01 ff 00",
		T + "c0 80 01",
		T + "ff ff ff ff ff ff ff ff ff 7f",
		T + "01 08 1000 00 00 00",
		T + "01 08 1000 ff 00 00",
		T + "05",
		T + "02 09 1000 0100 00 14 414243 09 9999 0010 00 02 2f5a 00",
		T + "01 00 10 01 88 01", // build ID of 1025 bytes
		// Paths Swift decodes as nil: truncated str and framewk, bad UTF-8,
		// reserved and unlearned codes, oversized extended codes.
		T + "01 09 1000 0100 00 0a 41 42",
		T + "01 09 1000 0100 00 53 41 78",
		T + "01 09 1000 0100 00 01 ff 00",
		T + "01 09 1000 0100 00 94 00",
		T + "01 09 1000 0100 00 a8 00",
		T + "01 09 1000 0100 00 c7 7fffffffffffffc0",
		T + "01 09 1000 0100 00 c3 00 00",
		// Images out of order and overlapping.
		T + "02 09 2000 0100 00 00 09 1000 0100 00 00",
		T + "02 09 1000 0100 00 00 09 1080 0100 00 00",
		// End of text past the 32-bit word.
		"01 00 01 0b ffffff00 7fff 00 00",
	} {
		src := unhex(t, c)
		_, _, err := DecodeImageMap(src)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("DecodeImageMap(%s) = %v; want a FormatError", c, err)
		}
	}
}

func TestSwiftVarint(t *testing.T) {
	for _, c := range []struct {
		v   uint64
		hex string
	}{
		{0, "00"}, {1, "01"}, {127, "80 7f"}, {64, "80 40"}, {100, "80 64"}, {128, "81 00"},
		{700, "85 3c"}, {1234, "89 52"}, {8192, "80 c0 00"}, {16383, "80 ff 7f"},
		{16384, "81 80 00"}, {65535, "83 ff 7f"}, {2097152, "81 80 80 00"},
	} {
		if got := appendSwiftVarint(nil, c.v); !slices.Equal(got, unhex(t, c.hex)) {
			t.Errorf("varint %d = % x; want %s", c.v, got, c.hex)
		}
		d := cifDecoder{src: unhex(t, c.hex)}
		if got, err := d.varint("v"); got != c.v || err != nil {
			t.Errorf("decode %s = %d, %v", c.hex, got, err)
		}
	}
}

// TestCIFLongCodes checks prefix codes of 320 and more, which Swift writes
// with a byte too few: sprof writes c1 01 07 for code 327.
func TestCIFLongCodes(t *testing.T) {
	var dirs []string
	for i := range 300 {
		dirs = append(dirs, fmt.Sprintf("d%03d", i))
	}
	first := "/" + strings.Join(dirs, "/") + "/f"
	second := "/" + strings.Join(dirs[:296], "/") + "/g"
	m, err := NewImageMap("", Word64, []Image{
		{Path: first, Base: 0x1000, EndOfText: 0x2000},
		{Path: second, Base: 0x2000, EndOfText: 0x3000},
	})
	if err != nil {
		t.Fatal(err)
	}
	enc := m.AppendCIF(nil)
	if !strings.Contains(string(enc), "\xc1\x01\x07\x02/g\x00") {
		t.Errorf("code 327 not written as c1 01 07: % x", enc[len(enc)-12:])
	}
	got, _, err := DecodeImageMap(enc)
	if err != nil || !got.Equal(m) {
		t.Errorf("round trip: %v %v", got, err)
	}
}

func TestCIFWordSizes(t *testing.T) {
	for _, c := range []struct {
		ws     WordSize
		images []Image
	}{
		{Word16, []Image{{Path: "/a", Base: 0x1000, EndOfText: 0x7000}, {Path: "/b", Base: 0x8000, EndOfText: 0xffff}}},
		{Word32, []Image{{Path: "/lib/a.so", Base: 0x7fff0000, EndOfText: 0x80010000}, {Path: "/lib/b.so", Base: 0x80020000, EndOfText: 0xffffffff}}},
		{Word64, wholeMapImages()},
	} {
		m, err := NewImageMap("p", c.ws, c.images)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := DecodeImageMap(m.AppendCIF(nil))
		if err != nil || !got.Equal(m) {
			t.Errorf("%v: round trip %v, %v", c.ws, got, err)
		}
	}
}

func TestImageMapLookup(t *testing.T) {
	images := wholeMapImages()
	images = append(images, Image{Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: seq(0x21, 0x34),
		Base: 0x7ffff0000000, EndOfText: 0x7ffff0001000, TextOffset: 0x28000})
	m, err := NewImageMap("", Word64, images)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr uint64
		path string
	}{
		{0, ""},
		{0x555555553fff, ""},
		{0x555555554000, "/home/u/a.out"},
		{0x555555555fff, "/home/u/a.out"},
		{0x555555556000, ""},
		{0x7ffff0000800, "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{0x7ffff7d94fff, "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{0x7ffff7fc3000, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{^uint64(0), ""},
	} {
		i := m.Lookup(c.addr)
		got := ""
		if i >= 0 {
			got = m.Image(i).Path
		}
		if got != c.path {
			t.Errorf("Lookup(0x%x) = %q; want %q", c.addr, got, c.path)
		}
	}
	libc := m.ByBuildID(seq(0x21, 0x34))
	if len(libc) != 2 || m.Image(libc[0]).Base != 0x7ffff0000000 || m.Image(libc[1]).Base != 0x7ffff7c00000 {
		t.Errorf("ByBuildID(libc) = %v", libc)
	}
	if got := m.Image(libc[0]).FileOffset(0x7ffff0000800); got != 0x28800 {
		t.Errorf("FileOffset = 0x%x", got)
	}
	if got := m.ByBuildID(seq(0x01, 0x14)); len(got) != 1 || m.Image(got[0]).Name != "a.out" {
		t.Errorf("ByBuildID(a.out) = %v", got)
	}
	if got := m.ByBuildID(nil); got != nil {
		t.Errorf("images without a build ID are indexed: %v", got)
	}
}

func TestNewImageMapCleansPaths(t *testing.T) {
	m, err := NewImageMap("", Word64, []Image{{Base: 0x1000, EndOfText: 0x2000, Path: "/tmp/\xffx.so"}})
	if err != nil {
		t.Fatal(err)
	}
	if im := m.Image(0); im.Path != "/tmp/\uFFFDx.so" || im.Name != "\uFFFDx.so" {
		t.Errorf("path %q, name %q", im.Path, im.Name)
	}
	if got, _, err := DecodeImageMap(m.AppendCIF(nil)); err != nil || !got.Equal(m) {
		t.Errorf("round trip: %v %v", got, err)
	}
}

func TestNewImageMapRejects(t *testing.T) {
	for _, images := range [][]Image{
		{{Base: 0x2000, EndOfText: 0x2000}},
		{{Base: 0x1000, EndOfText: 0x3000}, {Base: 0x2000, EndOfText: 0x4000}},
		{{Base: 0x1000, EndOfText: 0x2000, BuildID: make([]byte, 1025)}},
		{{Base: 0x1000, EndOfText: 0x2000, Path: strings.Repeat("\xffa", 1500)}}, // 6000 bytes as UTF-8
		{{Base: 0xff00, EndOfText: 0x10001}},
		{{Base: 0xff00, EndOfText: 0x10000}},
	} {
		if _, err := NewImageMap("", Word16, images); err == nil {
			t.Errorf("NewImageMap(%v) succeeded", images)
		}
	}
}
