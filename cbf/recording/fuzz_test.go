package recording

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"testing"

	"github.com/sprof/sprof/cbf"
)

// FuzzReader reads arbitrary bytes as a recording: the reader must stop
// with an error or a damaged tail, never panic, and parsing every chunk and
// decoding every stack must stay within bounds. Each input is read twice:
// as it is, and with its checksums made right, so that mutations reach the
// payload parsers instead of all failing the CRC.
func FuzzReader(f *testing.F) {
	data := writeRecording(f)
	f.Add(data)
	ends := chunkEnds(f, data)
	f.Add(data[:ends[3]+7])
	// The starts of real recordings, in both versions: real stacks and
	// maps.
	for _, name := range []string{fixture, fixtureV2} {
		if real, err := os.ReadFile(name); err == nil {
			f.Add(real[:chunkEnds(f, real)[6]])
		}
	}
	// Seeds where the checksum holds but the payload lies.
	for _, payload := range []string{"\x00\x00\x01\x05hello\x01\x03\x02\x02\x00\x01", "\x01\x00\x00\x01\xff\xff\xff\x0f", "\x00\x00\x00\x01\x02\x02\x00\x02\x80\x00\x00"} {
		bad := append([]byte(nil), data[:ends[0]]...)
		f.Add(appendChunk(bad, ChunkSamples, []byte(payload)))
	}
	f.Add(writeJITRecording(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		readFuzzed(t, data)
		readFuzzed(t, fixChecksums(data))
	})
}

// fixChecksums returns data with the CRC of every chunk that fits
// recomputed.
func fixChecksums(data []byte) []byte {
	data = bytes.Clone(data)
	for off := len(Magic); off+chunkHead <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off+1:]))
		end := off + chunkHead + n
		if n > MaxChunk || end+chunkTail > len(data) {
			break
		}
		binary.LittleEndian.PutUint32(data[end:], crc32.Checksum(data[off:end], castagnoli))
		off = end + chunkTail
	}
	return data
}

func readFuzzed(t *testing.T, data []byte) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return
	}
	var frames []cbf.Frame
	for {
		c, err := r.Next()
		if err != nil {
			break
		}
		if r.Offset() > int64(len(data)) {
			t.Fatalf("offset %d past %d bytes", r.Offset(), len(data))
		}
		switch c.Type {
		case ChunkEnd:
			c.End()
		case ChunkJIT:
			syms, _ := c.JIT()
			for _, s := range syms {
				if s.Size == 0 || s.Start+s.Size < s.Start || len(s.Lines) > MaxJITLines {
					t.Fatalf("bad JIT symbol read: %+v", s)
				}
			}
		case ChunkSamples:
			b, err := c.Batch()
			if err != nil {
				continue
			}
			// A few stacks a batch: each may be 65,536 frames deep.
			// After damage a group may refer past the table, to stacks
			// lost with it: Unplaced says so, and Stack must not be
			// called for them.
			decoded := map[int]bool{}
			for _, g := range b.Groups {
				if g.User < -1 || g.Kernel < -1 || len(g.Times) == 0 {
					t.Fatalf("group %+v", g)
				}
				if b.Unplaced(&g) {
					continue
				}
				if g.User >= b.Stacks.Len() || g.Kernel >= b.Stacks.Len() {
					t.Fatalf("group %+v placed with %d stacks", g, b.Stacks.Len())
				}
				for _, s := range []int{g.User, g.Kernel} {
					if s >= 0 && !decoded[s] && len(decoded) < 16 {
						decoded[s] = true
						if frames = b.Stacks.Stack(frames[:0], s); len(frames) > maxStackFrames+1 {
							t.Fatalf("stack %d has %d frames", s, len(frames))
						}
					}
				}
			}
		}
	}
	Summarize(bytes.NewReader(data))
}
