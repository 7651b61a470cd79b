package recording

import (
	"bytes"
	"testing"

	"github.com/sprof/sprof/cbf"
)

// FuzzReader reads arbitrary bytes as a recording: the reader must stop
// with an error or a damaged tail, never panic, and parsing every chunk and
// decoding every stack must stay within bounds.
func FuzzReader(f *testing.F) {
	data := writeRecording(f)
	f.Add(data)
	ends := chunkEnds(f, data)
	f.Add(data[:ends[3]+7])
	// Seeds where the checksum holds but the payload lies.
	for _, payload := range []string{"\x00\x00\x01\x05hello\x01\x03\x02\x02\x00\x01", "\x01\x00\x00\x01\xff\xff\xff\x0f", "\x00\x00\x00\x01\x02\x02\x00\x02\x80\x00\x00"} {
		bad := append([]byte(nil), data[:ends[0]]...)
		f.Add(appendChunk(bad, ChunkSamples, []byte(payload)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
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
			case ChunkProcesses:
				c.Processes()
			case ChunkEnd:
				c.End()
			case ChunkSamples:
				b, err := c.Batch()
				if err != nil {
					continue
				}
				for i := range b.Stacks {
					frames, _ = b.Stack(frames[:0], i)
				}
				for _, g := range b.Groups {
					if g.User >= len(b.Stacks) || g.Kernel >= len(b.Stacks) || len(g.Times) == 0 {
						t.Fatalf("group %+v with %d stacks", g, len(b.Stacks))
					}
				}
			}
		}
		Summarize(bytes.NewReader(data))
	})
}
