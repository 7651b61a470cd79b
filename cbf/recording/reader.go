package recording

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// ErrDamaged is matched (errors.Is) by the *DamagedError a Reader returns
// where the intact part of a recording ends.
var ErrDamaged = errors.New("recording: damaged tail")

// DamagedError says where the intact part of a recording ends: the chunk
// at Offset is cut short or corrupt, so it and everything after it are
// unusable. A recording whose writer was killed ends this way.
type DamagedError struct {
	Offset int64
	Reason string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("recording: damaged tail from offset %d: %s", e.Offset, e.Reason)
}

func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// Chunk is one intact chunk of a recording.
type Chunk struct {
	Type ChunkType
	// Offset is where the chunk starts in the file.
	Offset int64
	// Payload is the chunk's content, owned by the caller.
	Payload []byte
	// stacks is the stack table as the chunk found it, nstacks the
	// number of its entries then.
	stacks  *StackTable
	nstacks int
	procs   []Process
	version int
}

func (c *Chunk) payload() payload {
	return payload{b: c.Payload, base: c.Offset + chunkHead, version: c.version}
}

// Processes returns the records of a Processes chunk, which Next parsed.
func (c *Chunk) Processes() []Process { return c.procs }

// Batch parses a Samples chunk.
func (c *Chunk) Batch() (*Batch, error) { return parseBatch(c.payload(), c.stacks, c.nstacks) }

// End parses an End chunk.
func (c *Chunk) End() (End, error) { return parseEnd(c.payload()) }

// Reader reads the chunks of a recording in order. It keeps the
// recording's tables: the stacks, which the Stacks chunks build and the
// Samples chunks refer to, and the image maps, which process records
// define once and refer to after that.
type Reader struct {
	r      *bufio.Reader
	off    int64
	header Header
	stacks *StackTable
	maps   mapTable
	err    error // sticky: a DamagedError, a malformed table chunk, or io.EOF
}

// NewReader reads the magic and the header. A recording without an intact
// header is an error; the rest is read by Next.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: bufio.NewReader(r), stacks: &StackTable{}}
	var magic [len(Magic)]byte
	if _, err := io.ReadFull(rd.r, magic[:]); err != nil || string(magic[:]) != Magic {
		return nil, fmt.Errorf("recording: not an sprof recording (bad magic)")
	}
	rd.off = int64(len(Magic))
	c, err := rd.Next()
	if err != nil {
		return nil, fmt.Errorf("recording: header: %w", err)
	}
	if c.Type != ChunkHeader {
		return nil, fmt.Errorf("recording: first chunk at offset %d is %v, not the header", c.Offset, c.Type)
	}
	if rd.header, err = parseHeader(c.payload()); err != nil {
		return nil, fmt.Errorf("recording: header: %w", err)
	}
	return rd, nil
}

// Header returns the recording's header.
func (r *Reader) Header() Header { return r.header }

// Offset returns the offset just past the last chunk read.
func (r *Reader) Offset() int64 { return r.off }

// Next returns the next intact chunk, including those of types this
// package does not know, which callers skip. At the end of the recording it
// returns io.EOF; where a damaged tail starts, a *DamagedError. Either is
// returned again by later calls. Next parses the chunks that build the
// recording's tables (Stacks and Processes) itself; a malformed one is an
// error that ends the reading too, since what follows may refer to it.
func (r *Reader) Next() (Chunk, error) {
	if r.err != nil {
		return Chunk{}, r.err
	}
	c, err := r.next()
	c.version = r.header.Version
	if err == nil {
		switch c.Type {
		case ChunkStacks:
			r.stacks, err = parseStacks(c.payload(), r.stacks)
		case ChunkProcesses:
			c.procs, err = parseProcesses(c.payload(), &r.maps)
		}
		if err != nil {
			err = fmt.Errorf("recording: %v chunk at offset %d: %w", c.Type, c.Offset, err)
		}
	}
	if err != nil {
		r.err = err
		return Chunk{}, err
	}
	c.stacks, c.nstacks = r.stacks, r.stacks.Len()
	r.off += chunkHead + int64(len(c.Payload)) + chunkTail
	return c, nil
}

func (r *Reader) next() (Chunk, error) {
	c := Chunk{Offset: r.off}
	var head [chunkHead]byte
	switch n, err := io.ReadFull(r.r, head[:]); {
	case err == io.EOF:
		return c, io.EOF
	case err != nil:
		return c, r.damaged(fmt.Sprintf("chunk header cut short after %d of %d bytes", n, chunkHead), err)
	}
	c.Type = ChunkType(head[0])
	size := binary.LittleEndian.Uint32(head[1:])
	if size > MaxChunk {
		return c, r.damaged(fmt.Sprintf("chunk length %d exceeds %d", size, MaxChunk), nil)
	}
	body, err := readN(r.r, int(size)+chunkTail)
	if err != nil {
		return c, r.damaged(fmt.Sprintf("%v chunk of %d bytes cut short after %d", c.Type, size, len(body)), err)
	}
	c.Payload = body[:size:size]
	crc := crc32.Update(crc32.Checksum(head[:], castagnoli), castagnoli, c.Payload)
	if got := binary.LittleEndian.Uint32(body[size:]); got != crc {
		return c, r.damaged(fmt.Sprintf("%v chunk checksum 0x%08x, want 0x%08x", c.Type, got, crc), nil)
	}
	return c, nil
}

// damaged reports a damaged tail at the current chunk, unless the
// underlying reader failed for a reason of its own.
func (r *Reader) damaged(reason string, err error) error {
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("recording: read at offset %d: %w", r.off, err)
	}
	return &DamagedError{Offset: r.off, Reason: reason}
}

// readN reads n bytes, growing the buffer as data arrives, so that a
// length field cut or corrupted into a huge value costs memory only for the
// bytes actually there.
func readN(r io.Reader, n int) ([]byte, error) {
	const step = 1 << 20
	buf := make([]byte, 0, min(n, step))
	for len(buf) < n {
		k := min(n-len(buf), step)
		buf = slices.Grow(buf, k)
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
