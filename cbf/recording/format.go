package recording

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sprof/sprof/cbf"
)

// Magic starts every recording. The high first byte and the CR LF catch
// transfers that mangle binary files, as PNG's signature does.
const Magic = "\x89sprof\r\n"

// Version is the format version this package writes. Additions that old
// readers can skip (new chunk types, fields appended to a chunk) keep the
// version; anything else changes it. The reader reads every version from
// MinVersion on.
const Version = 3

// MinVersion is the oldest format version this package reads: version 2,
// whose stack table entries hold CBF records and whose times are in
// nanoseconds.
const MinVersion = 2

// ChunkType says what a chunk holds.
type ChunkType uint8

const (
	// ChunkHeader is the first chunk: who recorded what, when, and how.
	ChunkHeader ChunkType = 1
	// ChunkProcesses holds process records: image maps and their changes.
	ChunkProcesses ChunkType = 2
	// ChunkSamples holds one batch of samples.
	ChunkSamples ChunkType = 3
	// ChunkEnd is the last chunk of a recording that was closed.
	ChunkEnd ChunkType = 4
	// ChunkStacks adds entries to the recording's stack table.
	ChunkStacks ChunkType = 5
	// ChunkTables gives the sizes of the recording's tables, so that a
	// reader that skipped a damaged chunk knows which entries it lost.
	ChunkTables ChunkType = 6
	// ChunkJIT holds the symbols of code that processes generated at run
	// time (JIT compilers), which no file on disk names.
	ChunkJIT ChunkType = 7
	// ChunkOffCPU holds one batch of off-CPU records: a Samples chunk's
	// layout, each time a thread ran again after waiting off the CPU and
	// the group's weight the nanoseconds it waited. Readers from before
	// off-CPU recording skip it.
	ChunkOffCPU ChunkType = 8
	// ChunkPython holds the names of the Python frames of CPython
	// processes, read from the interpreter's memory while it ran. Readers
	// from before Python frames skip it.
	ChunkPython ChunkType = 9

	// maxChunkType is the highest type this package knows.
	maxChunkType = ChunkPython
)

func (t ChunkType) String() string {
	switch t {
	case ChunkHeader:
		return "header"
	case ChunkProcesses:
		return "processes"
	case ChunkSamples:
		return "samples"
	case ChunkEnd:
		return "end"
	case ChunkStacks:
		return "stacks"
	case ChunkTables:
		return "tables"
	case ChunkJIT:
		return "jit"
	case ChunkOffCPU:
		return "off-cpu"
	case ChunkPython:
		return "python"
	}
	return fmt.Sprintf("chunk type %d", uint8(t))
}

const (
	// chunkHead is the type byte and the 4-byte length before a payload.
	chunkHead = 5
	// chunkTail is the CRC-32C after a payload.
	chunkTail = 4
	// MaxChunk is the largest payload a reader accepts. Writers stay far
	// below it (see Options.MaxBatchBytes).
	MaxChunk = 64 << 20
	// maxString caps comm, host and other names.
	maxString = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendChunk frames payload as a chunk of type t.
func appendChunk(dst []byte, t ChunkType, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, byte(t))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// Flags describe a sample. A recording stores these two; a writer drops
// other bits.
type Flags uint32

const (
	// UserTruncated: the user stack walk stopped before the outermost
	// frame; the stack in the table is truncated too.
	UserTruncated Flags = 1 << iota
	// KernelTruncated: the same for the kernel stack.
	KernelTruncated
)

// Header describes a recording.
type Header struct {
	Version int
	// Start is when recording began; sample and process times are
	// offsets from it.
	Start time.Time
	// Host is the host name, Kernel the kernel release (uname -r) and Arch
	// the machine (uname -m) of the recorded host.
	Host, Kernel, Arch string
	// Frequency is the sampling frequency in Hz; each sample stands for
	// 1/Frequency seconds of CPU times its weight.
	Frequency uint64
}

func (h *Header) appendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(h.Version))
	dst = binary.AppendVarint(dst, h.Start.UnixNano())
	dst = appendString(dst, h.Host)
	dst = appendString(dst, h.Kernel)
	dst = appendString(dst, h.Arch)
	return binary.AppendUvarint(dst, h.Frequency)
}

func parseHeader(p payload) (Header, error) {
	var h Header
	v, err := p.uvarint("version")
	if err != nil {
		return h, err
	}
	if v < MinVersion || v > Version {
		return h, p.errorf(0, "version", "version %d; this reader knows %d to %d", v, MinVersion, Version)
	}
	h.Version = int(v)
	start, err := p.varint("start time")
	if err != nil {
		return h, err
	}
	h.Start = time.Unix(0, start)
	if h.Host, err = p.string("host"); err != nil {
		return h, err
	}
	if h.Kernel, err = p.string("kernel release"); err != nil {
		return h, err
	}
	if h.Arch, err = p.string("architecture"); err != nil {
		return h, err
	}
	h.Frequency, err = p.uvarint("frequency")
	return h, err
}

// Version 3 stores times, but for the header's start and the end chunk's,
// in microseconds: a sampling profiler's clock needs no finer grain, and a
// sample's time then takes 2 bytes instead of 3 or 4.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// micros converts a time in nanoseconds to microseconds. It truncates, so
// it keeps the order of times.
func micros(ns int64) int64 { return ns / int64(time.Microsecond) }

// addMicros returns the time t+d in µs, or an error when it is out of the
// range of a time.Duration. t is within that range.
func addMicros(t, d int64) (int64, error) {
	if d > maxMicros || d < -maxMicros || t+d > maxMicros || t+d < -maxMicros {
		return 0, fmt.Errorf("%d%+d µs is out of range", t, d)
	}
	return t + d, nil
}

// appendString writes s as a string field. Names from the system (a
// thread's comm is any 16 bytes) need not be UTF-8: invalid bytes become
// U+FFFD and overlong strings are cut, so the reader's rules always hold.
func appendString(dst []byte, s string) []byte { return appendStringMax(dst, s, maxString) }

// appendStringMax writes s as a string field of at most max bytes.
func appendStringMax(dst []byte, s string, max int) []byte {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "")
	}
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// payload reads the fields of a chunk's payload; base is the payload's
// offset in the file, so errors name file offsets.
type payload struct {
	b       []byte
	off     int
	base    int64
	version int // the recording's format version
}

func (p *payload) errorf(off int, field, format string, args ...any) error {
	return &cbf.FormatError{Offset: p.base + int64(off), Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (p *payload) uvarint(field string) (uint64, error) {
	v, n := binary.Uvarint(p.b[p.off:])
	if n <= 0 {
		return 0, p.errorf(p.off, field, "bad or truncated varint")
	}
	p.off += n
	return v, nil
}

func (p *payload) varint(field string) (int64, error) {
	v, n := binary.Varint(p.b[p.off:])
	if n <= 0 {
		return 0, p.errorf(p.off, field, "bad or truncated varint")
	}
	p.off += n
	return v, nil
}

// uint32 reads a uvarint that must fit in 32 bits.
func (p *payload) uint32(field string) (uint32, error) {
	off := p.off
	v, err := p.uvarint(field)
	if err == nil && v > math.MaxUint32 {
		err = p.errorf(off, field, "%d does not fit in 32 bits", v)
	}
	return uint32(v), err
}

// delta32 reads a signed difference from base whose sum must fit in 32
// bits unsigned.
func (p *payload) delta32(field string, base int64) (uint32, error) {
	off := p.off
	d, err := p.varint(field)
	if err != nil {
		return 0, err
	}
	v := base + d
	if d < -math.MaxUint32 || d > math.MaxUint32 || v < 0 || v > math.MaxUint32 {
		return 0, p.errorf(off, field, "%d%+d does not fit in 32 bits", base, d)
	}
	return uint32(v), nil
}

// count reads the number of entries that follow, each at least min bytes
// long, so a lying count cannot make the reader allocate.
func (p *payload) count(field string, min int) (int, error) {
	off := p.off
	v, err := p.uvarint(field)
	if err != nil {
		return 0, err
	}
	if v > uint64((len(p.b)-p.off)/min) {
		return 0, p.errorf(off, field, "%d entries do not fit in the %d bytes left", v, len(p.b)-p.off)
	}
	return int(v), nil
}

// bytes reads a length-prefixed byte string of at most max bytes.
func (p *payload) bytes(field string, max int) ([]byte, error) {
	off := p.off
	n, err := p.uvarint(field)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) || n > uint64(len(p.b)-p.off) {
		return nil, p.errorf(off, field, "length %d exceeds the limit %d or the %d bytes left", n, max, len(p.b)-p.off)
	}
	p.off += int(n)
	return p.b[p.off-int(n) : p.off : p.off], nil
}

// string reads a string field of at most maxString bytes.
func (p *payload) string(field string) (string, error) { return p.stringMax(field, maxString) }

func (p *payload) stringMax(field string, max int) (string, error) {
	off := p.off
	b, err := p.bytes(field, max)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", p.errorf(off, field, "not UTF-8")
	}
	return string(b), nil
}
