package cbf

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// unhex decodes hex written with spaces for readability, as cbf.md does.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad test hex %q: %v", s, err)
	}
	return b
}

func pc(a uint64) Frame   { return Frame{Kind: PC, Addr: a} }
func ra(a uint64) Frame   { return Frame{Kind: RA, Addr: a} }
func omit(n uint64) Frame { return Frame{Kind: Omit, Omitted: n} }

var trunc = Frame{Kind: Truncated}

func repeat(f Frame, n int) []Frame { return slices.Repeat([]Frame{f}, n) }

func concat(parts ...[]Frame) []Frame { return slices.Concat(parts...) }

// golden are the encoder vectors of cbf.md §2.6, produced by Swift [S]; each
// must encode to exactly these bytes and decode back to the frames.
var golden = []struct {
	name   string
	ws     WordSize
	frames []Frame
	hex    string
}{
	{"all instructions", Word64, concat(
		[]Frame{pc(0x1000), ra(0x1010), ra(0xf10), {Kind: Async, Addr: 0x7fff00002000}, omit(5), omit(1000),
			ra(0x2020), ra(0x2020)}, repeat(pc(0x3030), 10), []Frame{trunc}),
		"02 11 10 00 20 10 21 ff 00 35 7f ff 00 00 10 f0 44 61 03 e8 29 20 20 80 11 10 10 88 09 01"},
	{"one pc", Word64, []Frame{pc(0x9999)}, "02 12 00 99 99 00"},
	{"omit 1", Word64, []Frame{pc(0x1000), omit(1), pc(0x1000)}, "02 11 10 00 40 10 00 00"},
	{"omit 31", Word64, []Frame{pc(0x1000), omit(31), pc(0x1000)}, "02 11 10 00 5e 10 00 00"},
	{"omit 32", Word64, []Frame{pc(0x1000), omit(32), pc(0x1000)}, "02 11 10 00 60 20 10 00 00"},
	{"omit 256", Word64, []Frame{pc(0x1000), omit(256), pc(0x1000)}, "02 11 10 00 61 01 00 10 00 00"},
	{"omit 70000", Word64, []Frame{pc(0x1000), omit(70000), pc(0x1000)}, "02 11 10 00 62 01 11 70 10 00 00"},
	{"omit Int.max", Word64, []Frame{pc(0x1111), omit(math.MaxInt64), pc(0x2222)},
		"02 11 11 11 67 7f ff ff ff ff ff ff ff 11 11 11 00"},
	{"rep 99", Word64, concat([]Frame{pc(0x401000)}, repeat(ra(0x401234), 100), []Frame{ra(0x400100)}),
		"02 12 40 10 00 21 02 34 88 63 21 ee cc 00"},
	{"real stack", Word64, []Frame{pc(0x5555555551a9), ra(0x555555555230), ra(0x7ffff7829d90), ra(0x7ffff7829e40), ra(0x555555555085)},
		"02 15 55 55 55 55 51 a9 21 00 87 25 2a aa a2 2d 4b 60 21 00 b0 25 d5 55 5d d2 b2 45 00"},
	{"kernel ra", Word64, []Frame{ra(0xffffffff81000000)}, "02 23 81 00 00 00 00"},
	{"omit rep", Word64, []Frame{omit(3), omit(3), pc(0x10)}, "02 42 80 10 10 00"},
	{"32-bit wrap", Word32, []Frame{pc(0xfffffff0), ra(0x10)}, "01 10 f0 20 20 00"},
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range golden {
		got, err := AppendFrames(nil, g.ws, g.frames)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		if want := unhex(t, g.hex); !slices.Equal(got, want) {
			t.Errorf("%s: encoded\n % x\nwant\n % x", g.name, got, want)
		}
	}
}

func TestGoldenDecode(t *testing.T) {
	for _, g := range golden {
		src := unhex(t, g.hex)
		got, n, err := Decode(nil, src)
		if err != nil || n != len(src) || !slices.Equal(got, g.frames) {
			t.Errorf("%s: Decode = %v, %d, %v; want %v, %d", g.name, got, n, err, g.frames, len(src))
		}
	}
}

func TestSwiftBase64(t *testing.T) {
	// Swift's JSON holds the record in unpadded standard base64.
	got, _ := AppendFrames(nil, Word64, golden[0].frames)
	if s := base64.RawStdEncoding.EncodeToString(got); s != "AhEQACAQIf8ANX//AAAQ8ERhA+gpICCAERAQiAkB" {
		t.Errorf("base64 %s", s)
	}
}

func TestAppendStackMatchesFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ws := range []WordSize{Word16, Word32, Word64} {
		for range 500 {
			pcs := randomPCs(rng, rng.IntN(70))
			truncated := rng.IntN(2) == 0
			frames := make([]Frame, len(pcs))
			for i, a := range pcs {
				frames[i] = Frame{Kind: RA, Addr: a & ws.Mask()}
			}
			if len(frames) > 0 {
				frames[0].Kind = PC
			}
			if truncated {
				frames = append(frames, trunc)
			}
			want, err := AppendFrames(nil, ws, frames)
			if err != nil {
				t.Fatal(err)
			}
			if got := AppendStack(nil, ws, pcs, truncated); !slices.Equal(got, want) {
				t.Fatalf("%v %x: AppendStack\n % x\nAppendFrames\n % x", ws, pcs, got, want)
			}
		}
	}
}

// randomPCs returns addresses that look like a stack: clusters in a few
// images with repeats (recursion) and the odd wild value.
func randomPCs(rng *rand.Rand, n int) []uint64 {
	bases := []uint64{0x555555554000, 0x7ffff7c00000, 0xffffffff81000000, 0x400000, uint64(rng.Uint32())}
	pcs := make([]uint64, 0, n)
	for len(pcs) < n {
		switch rng.IntN(10) {
		case 0:
			pcs = append(pcs, rng.Uint64())
		case 1:
			if len(pcs) > 0 {
				pcs = append(pcs, slices.Repeat(pcs[len(pcs)-1:], 1+rng.IntN(12))...)
				break
			}
			fallthrough
		default:
			pcs = append(pcs, bases[rng.IntN(len(bases))]+uint64(rng.IntN(1<<20)))
		}
	}
	return pcs[:n]
}

func randomFrames(rng *rand.Rand, ws WordSize, n int) []Frame {
	var frames []Frame
	for len(frames) < n {
		var f Frame
		switch k := rng.IntN(12); {
		case k < 3:
			f = Frame{Kind: PC, Addr: rng.Uint64() >> rng.IntN(64)}
		case k < 9:
			f = Frame{Kind: RA, Addr: 0x7ffff7c00000 + uint64(rng.IntN(1<<24))}
		case k < 10:
			f = Frame{Kind: Async, Addr: rng.Uint64()}
		default:
			f = Frame{Kind: Omit, Omitted: 1 + rng.Uint64N(math.MaxInt64)>>rng.IntN(63)}
		}
		f.Addr &= ws.Mask()
		frames = append(frames, repeat(f, 1+rng.IntN(3)*rng.IntN(20))...)
	}
	frames = frames[:n]
	if rng.IntN(3) == 0 {
		frames = append(frames, trunc)
	}
	return frames
}

func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var buf []byte
	var got []Frame
	for _, ws := range []WordSize{Word16, Word32, Word64} {
		for range 3000 {
			want := randomFrames(rng, ws, rng.IntN(100))
			var err error
			buf, err = AppendFrames(buf[:0], ws, want)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			got, n, err = Decode(got[:0], buf)
			if err != nil || n != len(buf) || !slices.Equal(got, want) {
				t.Fatalf("%v: % x decodes to %v, %d, %v; want %v", ws, buf, got, n, err, want)
			}
		}
	}
}

func TestRecordsConcatenate(t *testing.T) {
	var buf []byte
	stacks := [][]uint64{{0x401000, 0x401234}, {}, {0xffffffff81000000, 0xffffffff81000010}}
	for i, s := range stacks {
		buf = AppendStack(buf, Word64, s, i == 1)
	}
	var frames []Frame
	for i := range stacks {
		var n int
		var err error
		frames, n, err = Decode(frames[:0], buf)
		if err != nil || len(frames) != len(stacks[i])+btoi(i == 1) {
			t.Fatalf("record %d: %v %v", i, frames, err)
		}
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Errorf("%d bytes left", len(buf))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSwiftDecode checks the Swift-compatible mode against cbf.md §2.5.
func TestSwiftDecode(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want []Frame
	}{
		{"", nil},
		{"03", nil},
		{"04", nil},
		{"03 11", nil},
		{"06 11", nil},
		{"02", []Frame{trunc}},
		{"02 12 00 99 99", []Frame{pc(0x9999), trunc}},
		{"02 05", []Frame{trunc}},
		{"02 90", []Frame{trunc}},
		{"02 80", []Frame{trunc}},
		{"02 12 00", []Frame{trunc}},
		{"02 10 01 88 00 00", []Frame{pc(1), pc(1)}},
		{"02 10 01 60 00 00", []Frame{pc(1), omit(0)}},
		{"02 6f" + strings.Repeat(" 00", 15) + " 05 00", []Frame{omit(5)}},
		{"01 14 12 34 56 78 9a 00", []Frame{pc(0x3456789a)}},
		{"02 40 41 80 00", []Frame{omit(1), omit(2), omit(2)}},
		{"02 18 7f 8a 10 00 02", []Frame{pc(0x7f), trunc}},
	} {
		d := Decoder{Swift: true}
		got, _, err := d.Decode(nil, unhex(t, c.hex))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Swift decode of %s = %v, %v; want %v", c.hex, got, err, c.want)
		}
	}
}

func TestRepeatLimit(t *testing.T) {
	d := Decoder{MaxFrames: 2 << 20}
	got, _, err := d.Decode(nil, unhex(t, "02 18 7f 8a 10 00 01 00"))
	if err != nil || len(got) != 1048578 || got[len(got)-1] != pc(0x7f) {
		t.Errorf("repeat limit: %d frames, %v", len(got), err)
	}
	if _, _, err := d.Decode(nil, unhex(t, "02 18 7f 8a 10 00 02")); err == nil {
		t.Error("rep count 1048578 accepted")
	}
	// The encoder splits longer runs into several reps.
	frames := repeat(ra(0x7f), MaxRepeat+10)
	buf, _ := AppendFrames(nil, Word64, frames)
	if want := unhex(t, "02 20 7f 8a 10 00 00 88 09 00"); !slices.Equal(buf, want) {
		t.Errorf("long run encoded as % x; want % x", buf, want)
	}
}

// TestStrictErrors checks that each malformed record fails with the offset
// and the field named.
func TestStrictErrors(t *testing.T) {
	for _, c := range []struct {
		hex   string
		off   int64
		field string
	}{
		{"", 0, "info byte"},
		{"03", 0, "info byte"},
		{"06 11", 0, "info byte"},
		{"02", 1, "opcode"},
		{"02 12 00 99 99", 5, "opcode"},
		{"02 05", 1, "opcode"},
		{"02 90", 1, "opcode"},
		{"02 80", 1, "rep"},
		{"02 12 00", 1, "pc"},
		{"02 10 01 88 00 00", 3, "rep"},
		{"02 10 01 60 00 00", 3, "omit"},
		{"02 6f" + strings.Repeat(" 00", 15) + " 05 00", 1, "omit"},
		{"02 67 80 00 00 00 00 00 00 00 00", 1, "omit"},
		{"01 14 12 34 56 78 9a 00", 1, "pc"},
		{"00 22 01 02 03 00", 1, "ra"},
		{"02 18 7f 8a 10 00 02", 3, "rep"},
		{"02 10 01 8a 01 00 00 00", 3, "record"}, // 65537 frames > default budget
	} {
		_, _, err := Decode(nil, unhex(t, c.hex))
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset != c.off || fe.Field != c.field {
			t.Errorf("Decode(%s) = %v; want a %s error at offset %d", c.hex, err, c.field, c.off)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	for _, frames := range [][]Frame{
		{omit(0)},
		{omit(math.MaxInt64 + 1)},
		{trunc, pc(1)},
		{{Kind: 9}},
	} {
		if _, err := AppendFrames(nil, Word64, frames); err == nil {
			t.Errorf("AppendFrames(%v) succeeded", frames)
		}
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	buf := AppendStack(nil, Word64, randomPCs(rand.New(rand.NewPCG(5, 6)), 60), false)
	frames := make([]Frame, 0, 64)
	if n := testing.AllocsPerRun(100, func() { frames, _, _ = Decode(frames[:0], buf) }); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
}

func TestLimit(t *testing.T) {
	var frames []Frame
	for i := range 100 {
		frames = append(frames, ra(uint64(i)))
	}
	got := AppendLimited(nil, frames, 10, 4)
	want := concat(frames[:5], []Frame{omit(91)}, frames[96:])
	if !slices.Equal(got, want) {
		t.Errorf("limit 10 top 4: %v", got)
	}
	got = AppendLimited(nil, frames, 10, 0)
	if want := concat(frames[:9], []Frame{trunc}); !slices.Equal(got, want) {
		t.Errorf("limit 10 top 0: %v", got)
	}
	if got := AppendLimited(nil, frames, 100, 16); !slices.Equal(got, frames) {
		t.Errorf("under the limit: %v", got)
	}
}

func TestBacktraceJSON(t *testing.T) {
	m, err := NewImageMap("Linux (Debian GNU/Linux 12 (bookworm))", Word64, wholeMapImages())
	if err != nil {
		t.Fatal(err)
	}
	bt := &Backtrace{Architecture: "x86_64", WordSize: Word64, Frames: golden[0].frames, Images: m}
	data, err := bt.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	wantMap := base64.RawStdEncoding.EncodeToString(unhex(t, wholeMap))
	want := `{"architecture":"x86_64","backtrace":"AhEQACAQIf8ANX//AAAQ8ERhA+gpICCAERAQiAkB","imageMap":"` + wantMap + `"}`
	if string(data) != want {
		t.Errorf("JSON\n%s\nwant\n%s", data, want)
	}
	var back Backtrace
	if err := back.UnmarshalJSON(data); err != nil || !slices.Equal(back.Frames, bt.Frames) || !back.Images.Equal(m) {
		t.Errorf("round trip: %v %v", back, err)
	}
	// Swift 6.2 writes no end byte: the frames come back with a Truncated
	// frame, as Swift shows them.
	if err := back.UnmarshalJSON([]byte(`{"architecture":"x86_64","backtrace":"AhIAmZk"}`)); err != nil ||
		!slices.Equal(back.Frames, []Frame{pc(0x9999), trunc}) || back.Images != nil {
		t.Errorf("Swift 6.2 record: %v %v", back.Frames, err)
	}
}

func TestDecodeBase64(t *testing.T) {
	for in, want := range map[string]string{
		"AhIAmZkA":     "02 12 00 99 99 00",
		"AhIAmZkA==":   "02 12 00 99 99 00",
		"AhIAmZk=AAAA": "02 12 00 99 99",
		"-_-_":         "fb ff bf",
		"AhIA!mZk":     "02 12 00",
		"AhIAm":        "02 12 00",
	} {
		got, err := DecodeBase64(in)
		if err != nil || !slices.Equal(got, unhex(t, want)) {
			t.Errorf("DecodeBase64(%q) = % x, %v; want %s", in, got, err, want)
		}
	}
}
