package recording

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// ErrDamaged is matched (errors.Is) by a *DamagedError.
var ErrDamaged = errors.New("recording: damaged")

// DamagedError describes a damaged stretch of a recording: the chunk at
// Offset is cut short or corrupt, and reading went on at End, the next
// intact chunk or the end of the file. A recording whose writer was killed
// ends in one that reaches the end of the file.
type DamagedError struct {
	Offset, End int64
	Reason      string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("recording: damaged from offset %d to %d: %s", e.Offset, e.End, e.Reason)
}

func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// maxDamage bounds the damaged stretches a Reader lists; it counts them
// all.
const maxDamage = 64

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
//
// A damaged chunk is skipped: the Reader finds the next intact one (a
// chunk whose CRC holds) and goes on from there, and Damage lists what it
// skipped. A chunk whose only damage is in its type or length field is
// repaired by its CRC. What a skipped chunk defined is lost to the chunks
// that refer to it: the Reader marks the stacks, maps and samples that
// refer to lost entries (StackTable.Lost, Process.Damaged), and leaves out
// a Processes chunk whose map references it cannot place until a Tables
// chunk, which the writer puts before each flush's Processes and Stacks
// chunks, says how large the tables have grown.
type Reader struct {
	r      io.Reader
	buf    []byte // read from r, not consumed; buf[0] is at off
	eof    bool   // r has no more
	rerr   error  // r failed
	off    int64
	header Header
	stacks *StackTable
	maps   mapTable
	err    error // sticky: a malformed table chunk, a read error, or io.EOF
	// mapsBehind says a Processes chunk may have been lost since the
	// last Tables chunk; stacksBehind the same of a Stacks chunk.
	mapsBehind, stacksBehind bool
	damage                   []*DamagedError
	ndamaged                 int
}

// NewReader reads the magic and the header. A recording without an intact
// header is an error; the rest is read by Next.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: r, stacks: &StackTable{}}
	if rd.fill(len(Magic)) < len(Magic) || string(rd.buf[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("recording: not an sprof recording (bad magic)")
	}
	rd.consume(len(Magic))
	c, err := rd.next()
	if err != nil {
		return nil, fmt.Errorf("recording: header: %w", err)
	}
	if c.Type != ChunkHeader {
		return nil, fmt.Errorf("recording: first chunk at offset %d is %v, not the header", c.Offset, c.Type)
	}
	if rd.header, err = parseHeader(c.payload()); err != nil {
		return nil, fmt.Errorf("recording: header: %w", err)
	}
	rd.consume(chunkHead + len(c.Payload) + chunkTail)
	return rd, nil
}

// Header returns the recording's header.
func (r *Reader) Header() Header { return r.header }

// Offset returns the offset just past the last chunk read, or past the
// damage that ends the file.
func (r *Reader) Offset() int64 { return r.off }

// Damage returns the damaged stretches skipped so far, in file order: the
// first 64, and how many there were in all.
func (r *Reader) Damage() ([]*DamagedError, int) { return r.damage, r.ndamaged }

// Next returns the next intact chunk, including those of types this
// package does not know, which callers skip. At the end of the recording it
// returns io.EOF, again on later calls. Damaged chunks are skipped (see
// Reader). Next parses the chunks that build the recording's tables
// (Stacks, Processes, Tables) itself; a malformed one is an error that ends
// the reading, since what follows may refer to it.
func (r *Reader) Next() (Chunk, error) {
	for r.err == nil {
		c, err := r.next()
		var de *DamagedError
		if errors.As(err, &de) {
			var ok bool
			if c, ok = r.skip(de); !ok {
				continue
			}
		} else if err != nil {
			r.err = err
			break
		}
		c.version = r.header.Version
		use, err := r.tables(&c)
		if err != nil {
			r.err = fmt.Errorf("recording: %v chunk at offset %d: %w", c.Type, c.Offset, err)
			break
		}
		r.consume(chunkHead + len(c.Payload) + chunkTail)
		if use {
			return c, nil
		}
	}
	return Chunk{}, r.err
}

// tables applies a chunk to the tables, and says whether to return it.
// After damage, a Processes chunk is left out until a Tables chunk says
// which maps were lost, and a Stacks chunk that does not continue the
// table read so far; a Samples chunk may then refer to stacks past the
// table, which are lost.
func (r *Reader) tables(c *Chunk) (use bool, err error) {
	switch c.Type {
	case ChunkTables:
		err = r.sync(c.payload())
	case ChunkStacks:
		first, n := binary.Uvarint(c.Payload)
		if r.stacksBehind && n > 0 && first != 0 && first != uint64(r.stacks.Len()) {
			return false, nil
		}
		r.stacksBehind = false // this chunk continues the table: nothing was lost
		r.stacks, err = parseStacks(c.payload(), r.stacks)
	case ChunkProcesses:
		if r.mapsBehind {
			return false, nil
		}
		c.procs, err = parseProcesses(c.payload(), &r.maps)
	}
	c.stacks, c.nstacks = r.stacks, r.stacks.Len()
	if r.stacksBehind {
		c.nstacks = maxTableFrames // references past the table are to lost stacks
	}
	return true, err
}

// skip handles the damaged chunk de at buf[0]: it finds the next intact
// chunk and records the stretch up to it as damaged, or repairs the chunk
// when only its type or length field was damaged, and returns it then.
func (r *Reader) skip(de *DamagedError) (Chunk, bool) {
	at := r.resync()
	de.End = de.Offset + int64(at)
	r.ndamaged++
	if len(r.damage) < maxDamage {
		r.damage = append(r.damage, de)
	}
	if c, ok := r.repair(at); ok {
		de.Reason += fmt.Sprintf("; repaired by its checksum as a %v chunk of %d bytes", c.Type, len(c.Payload))
		return c, true
	}
	// What the lost chunk defined: a chunk cut or damaged in its head
	// may have been of any type.
	typ, size := ChunkType(r.buf[0]), 0
	if len(r.buf) >= chunkHead {
		size = int(binary.LittleEndian.Uint32(r.buf[1:]))
	}
	if at != chunkHead+size+chunkTail {
		typ = 0
	}
	switch typ {
	case ChunkSamples, ChunkEnd, ChunkTables:
	case ChunkStacks:
		r.stacksBehind = true
	case ChunkProcesses:
		r.mapsBehind = true
	default:
		r.mapsBehind, r.stacksBehind = true, true
	}
	r.consume(at)
	return Chunk{}, false
}

// repair checks whether the at bytes at buf[0] are one chunk whose type or
// length field alone is damaged: its CRC holds with the length that fills
// them and one of the known types.
func (r *Reader) repair(at int) (Chunk, bool) {
	size := at - chunkHead - chunkTail
	if size < 0 {
		return Chunk{}, false
	}
	want := binary.LittleEndian.Uint32(r.buf[at-chunkTail : at])
	var head [chunkHead]byte
	binary.LittleEndian.PutUint32(head[1:], uint32(size))
	for t := ChunkProcesses; t <= maxChunkType; t++ {
		head[0] = byte(t)
		crc := crc32.Update(crc32.Checksum(head[:], castagnoli), castagnoli, r.buf[chunkHead:chunkHead+size])
		if crc == want {
			r.buf[0] = head[0]
			binary.LittleEndian.PutUint32(r.buf[1:], uint32(size))
			return Chunk{Type: t, Offset: r.off, Payload: r.buf[chunkHead : chunkHead+size : chunkHead+size]}, true
		}
	}
	return Chunk{}, false
}

// resync returns how many bytes from the damaged chunk at buf[0] to the
// next intact chunk: the next offset that starts a chunk of a type this
// package knows whose length fits and whose CRC holds, or the end of the
// file. Only a candidate whose type and length fit costs a CRC; on
// damaged data that is rare, so resync is about linear in the bytes it
// passes. A false match needs a 32-bit CRC to hold by chance.
func (r *Reader) resync() int {
	for at := 1; ; at++ {
		if r.fill(at+chunkHead) < at+chunkHead {
			return len(r.buf)
		}
		head := r.buf[at : at+chunkHead]
		if t := ChunkType(head[0]); t < ChunkProcesses || t > maxChunkType {
			continue
		}
		size := int(binary.LittleEndian.Uint32(head[1:]))
		if size > MaxChunk {
			continue
		}
		end := at + chunkHead + size + chunkTail
		if r.fill(end) < end {
			continue
		}
		crc := crc32.Checksum(r.buf[at:at+chunkHead+size], castagnoli)
		if binary.LittleEndian.Uint32(r.buf[end-chunkTail:end]) == crc {
			return at
		}
	}
}

// fill reads until buf holds n bytes or r ends, and returns len(buf). It
// reads a step at a time, so that a length corrupted into a huge value
// costs memory only for the bytes actually there.
func (r *Reader) fill(n int) int {
	const step = 64 << 10
	for len(r.buf) < n && !r.eof {
		k := min(n-len(r.buf), step)
		r.buf = slices.Grow(r.buf, k)
		m, err := io.ReadFull(r.r, r.buf[len(r.buf):len(r.buf)+k])
		r.buf = r.buf[:len(r.buf)+m]
		if err != nil {
			r.eof = true
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				r.rerr = err
			}
		}
	}
	return len(r.buf)
}

// consume drops n bytes from the front of buf.
func (r *Reader) consume(n int) {
	r.buf = r.buf[n:]
	r.off += int64(n)
	if len(r.buf) == 0 {
		r.buf = r.buf[:0:0] // let a large buffer go
	}
}

// next parses the chunk at buf[0] without consuming it.
func (r *Reader) next() (Chunk, error) {
	c := Chunk{Offset: r.off}
	switch n := r.fill(chunkHead); {
	case n == 0 && r.rerr == nil:
		return c, io.EOF
	case n < chunkHead:
		return c, r.damaged(fmt.Sprintf("chunk header cut short after %d of %d bytes", n, chunkHead))
	}
	c.Type = ChunkType(r.buf[0])
	size := binary.LittleEndian.Uint32(r.buf[1:])
	if size > MaxChunk {
		return c, r.damaged(fmt.Sprintf("chunk length %d exceeds %d", size, MaxChunk))
	}
	end := chunkHead + int(size) + chunkTail
	if n := r.fill(end); n < end {
		return c, r.damaged(fmt.Sprintf("%v chunk of %d bytes cut short after %d", c.Type, size, n-chunkHead))
	}
	crc := crc32.Checksum(r.buf[:chunkHead+int(size)], castagnoli)
	if got := binary.LittleEndian.Uint32(r.buf[end-chunkTail:]); got != crc {
		return c, r.damaged(fmt.Sprintf("%v chunk checksum 0x%08x, want 0x%08x", c.Type, got, crc))
	}
	// The caller owns the payload: buf only ever grows past it, and a
	// new array replaces it once consumed (see consume).
	c.Payload = r.buf[chunkHead : chunkHead+int(size) : chunkHead+int(size)]
	return c, nil
}

// damaged reports damage at the current chunk, unless the underlying
// reader failed for a reason of its own.
func (r *Reader) damaged(reason string) error {
	if r.rerr != nil {
		return fmt.Errorf("recording: read at offset %d: %w", r.off+int64(len(r.buf)), r.rerr)
	}
	return &DamagedError{Offset: r.off, Reason: reason}
}

// sync applies a Tables chunk: the tables grow to the sizes it gives, with
// entries lost to damage where the Reader has fewer, and are whole again.
// A stack table larger than the chunk says was begun anew (see
// StackTable.pad).
func (r *Reader) sync(p payload) error {
	var n [5]uint64
	for i, field := range []string{"maps", "images", "containers", "stacks", "stack words"} {
		off := p.off
		v, err := p.uvarint(field)
		if err != nil {
			return err
		}
		// No table holds more; a larger count would cost memory.
		if v > maxTableFrames {
			return p.errorf(off, field, "%d entries, more than the %d a table holds", v, maxTableFrames)
		}
		n[i] = v
	}
	r.maps.pad(int(n[0]), int(n[1]), int(n[2]))
	r.stacks = r.stacks.pad(int(n[3]), int(n[4]))
	r.mapsBehind, r.stacksBehind = false, false
	return nil
}
