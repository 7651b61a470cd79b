package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// The jitdump format, as Linux perf specifies it in
// tools/perf/Documentation/jitdump-specification.txt.
const (
	jitMagic       = 0x4A695444 // "JiTD" as a native-endian uint32
	fileHeaderSize = 40         // magic … flags
	recHeaderSize  = 16         // id, total_size, timestamp

	recCodeLoad      = 0
	recCodeMove      = 1
	recCodeDebugInfo = 2
	recCodeClose     = 3

	codeLoadFixed  = 40 // pid, tid, vma, code_addr, code_size, code_index
	codeMoveFixed  = 48
	debugInfoFixed = 16 // code_addr, nr_entry
	debugEntryMin  = 17 // addr, lineno, discrim, at least the NUL
)

// Bounds on one record: a runtime writes names of a few hundred bytes and
// line tables of a few thousand entries; more is skipped, not read.
const (
	maxRecordRead = 16 << 20
	maxHeaderSize = 4096
)

// FormatError is a malformed jitdump: the field named Field at byte
// offset Offset of the file.
type FormatError struct {
	Offset int64
	Field  string
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("jitdump: %s at offset %d: %s", e.Field, e.Offset, e.Msg)
}

// ErrClosed is returned once a jitdump's code-close record has been read:
// the runtime writes nothing more.
var ErrClosed = errors.New("jitdump: closed by the runtime")

// JITDump parses a jitdump file (jit-PID.dump) as it grows. Each call to
// Read parses the complete records between the end of the last one read
// and size, the file's current size; a record still being written is
// read by a later call. Code-load records become symbols, with the lines
// of the debug-info record that came before them; a code-move record
// adds the moved code under its new address.
type JITDump struct {
	off    int64
	order  binary.ByteOrder
	closed bool
	// lines is the debug-info record waiting for its code load.
	lines     []Line
	linesAddr uint64
	buf       []byte
	// Malformed counts records skipped because they could not be parsed.
	Malformed int
	// Err is the first skipped record's error, for a message.
	Err error
}

// Offset is where the next record starts.
func (d *JITDump) Offset() int64 { return d.off }

// Read parses the records of r in [Offset, size). It returns ErrClosed
// after a code-close record and a *FormatError when the file is no
// jitdump or a record's length cannot be trusted, after which nothing
// more can be read. A record that is well framed but malformed inside is
// skipped and counted in Malformed.
func (d *JITDump) Read(r io.ReaderAt, size int64, t *Table) error {
	if d.closed {
		return ErrClosed
	}
	if d.order == nil {
		if size < fileHeaderSize {
			return nil
		}
		if err := d.readHeader(r, size); err != nil || d.order == nil {
			return err
		}
	}
	for d.off+recHeaderSize <= size {
		h, err := d.read(r, d.off, recHeaderSize)
		if err != nil {
			return err
		}
		id, total := d.order.Uint32(h), int64(d.order.Uint32(h[4:]))
		if total < recHeaderSize {
			return &FormatError{d.off + 4, "total_size", fmt.Sprintf("%d is less than a record header", total)}
		}
		if d.off+total > size {
			return nil // still being written
		}
		if err := d.record(r, id, total, t); err != nil {
			d.Malformed++
			if d.Err == nil {
				d.Err = err
			}
		}
		d.off += total
		if id == recCodeClose {
			d.closed = true
			return ErrClosed
		}
	}
	return nil
}

// readHeader reads the file header, or leaves d as it was while the
// header is not all there yet.
func (d *JITDump) readHeader(r io.ReaderAt, size int64) error {
	h := make([]byte, fileHeaderSize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return fmt.Errorf("jitdump: read header: %w", err)
	}
	switch {
	case binary.LittleEndian.Uint32(h) == jitMagic:
		d.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h) == jitMagic:
		d.order = binary.BigEndian
	default:
		return &FormatError{0, "magic", fmt.Sprintf("%#x is not JiTD", binary.LittleEndian.Uint32(h))}
	}
	if v := d.order.Uint32(h[4:]); v != 1 {
		d.order = nil
		return &FormatError{4, "version", fmt.Sprintf("%d, not 1", v)}
	}
	total := d.order.Uint32(h[8:])
	if total < fileHeaderSize || total > maxHeaderSize {
		d.order = nil
		return &FormatError{8, "total_size", fmt.Sprintf("%d is not in [%d, %d]", total, fileHeaderSize, maxHeaderSize)}
	}
	if int64(total) > size {
		d.order = nil // the rest of the header is still being written
		return nil
	}
	d.off = int64(total)
	return nil
}

// read reads n bytes at off into d's buffer.
func (d *JITDump) read(r io.ReaderAt, off int64, n int) ([]byte, error) {
	if cap(d.buf) < n {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	if _, err := r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("jitdump: read %d bytes at offset %d: %w", n, off, err)
	}
	return b, nil
}

// record parses the record of type id and total size total at d.off.
func (d *JITDump) record(r io.ReaderAt, id uint32, total int64, t *Table) error {
	body := total - recHeaderSize
	at := d.off + recHeaderSize
	switch id {
	case recCodeLoad:
		if body < codeLoadFixed+1 {
			return &FormatError{d.off + 4, "total_size", fmt.Sprintf("code load of %d bytes", total)}
		}
		b, err := d.read(r, at, int(min(body, codeLoadFixed+MaxName+1)))
		if err != nil {
			return err
		}
		addr, size := d.order.Uint64(b[16:]), d.order.Uint64(b[24:])
		name := b[codeLoadFixed:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
			if room := uint64(body - codeLoadFixed - int64(i) - 1); size > room {
				return &FormatError{at + 24, "code_size", fmt.Sprintf("%d bytes of code do not fit in the record's %d", size, room)}
			}
		} else if int64(len(b)) == body {
			return &FormatError{at + codeLoadFixed, "name", "no terminating NUL"}
		}
		s := Symbol{Start: addr, Size: size, Name: strings.ToValidUTF8(string(name), "\uFFFD")}
		if d.lines != nil && d.linesAddr == addr {
			s.Lines = d.lines
			for i, l := range s.Lines {
				if l.Offset >= size {
					s.Lines = s.Lines[:i] // past the code: not this code's lines
					break
				}
			}
		}
		d.lines = nil
		t.Add(s)
	case recCodeMove:
		if body < codeMoveFixed {
			return &FormatError{d.off + 4, "total_size", fmt.Sprintf("code move of %d bytes", total)}
		}
		b, err := d.read(r, at, codeMoveFixed)
		if err != nil {
			return err
		}
		from, to, size := d.order.Uint64(b[16:]), d.order.Uint64(b[24:]), d.order.Uint64(b[32:])
		old := t.At(from)
		if old == nil {
			return &FormatError{at + 16, "old_code_addr", fmt.Sprintf("%#x: no code loaded there", from)}
		}
		moved := *old
		moved.Start, moved.Size = to, size
		t.Add(moved)
	case recCodeDebugInfo:
		if body > maxRecordRead {
			return &FormatError{d.off + 4, "total_size", fmt.Sprintf("debug info of %d bytes, more than %d", total, maxRecordRead)}
		}
		b, err := d.read(r, at, int(body))
		if err != nil {
			return err
		}
		return d.debugInfo(b, at)
	}
	return nil // code close, unwinding info and later types: nothing to name
}

// debugInfo parses a debug-info record's body b, found at file offset at,
// and keeps its lines for the code load that follows.
func (d *JITDump) debugInfo(b []byte, at int64) error {
	d.lines = nil
	if len(b) < debugInfoFixed {
		return &FormatError{at, "debug info", "shorter than its header"}
	}
	addr, n := d.order.Uint64(b), d.order.Uint64(b[8:])
	rest := b[debugInfoFixed:]
	if n > uint64(len(rest)/debugEntryMin) {
		return &FormatError{at + 8, "nr_entry", fmt.Sprintf("%d entries do not fit in %d bytes", n, len(rest))}
	}
	lines := make([]Line, 0, min(n, MaxLines))
	var file string
	pos := at + debugInfoFixed
	for i := uint64(0); i < n; i++ {
		if len(rest) < debugEntryMin {
			return &FormatError{pos, "debug entry", "cut short"}
		}
		ea, line := d.order.Uint64(rest), int32(d.order.Uint32(rest[8:]))
		name := rest[16:]
		end := bytes.IndexByte(name, 0)
		if end < 0 {
			return &FormatError{pos + 16, "debug entry name", "no terminating NUL"}
		}
		if !(end == 1 && name[0] == 0xff) { // 0xff: the previous entry's file
			if !plausibleFile(name[:end]) {
				// Written over (Node 20's V8 clobbers the start of some
				// names, NULs included): this entry and everything after
				// it, which may be read out of step, are dropped.
				d.lines, d.linesAddr = lines, addr
				return &FormatError{pos + 16, "debug entry name", "not a file name"}
			}
			file = string(name[:end])
		}
		consumed := 16 + end + 1
		rest, pos = rest[consumed:], pos+int64(consumed)
		if ea < addr || line <= 0 || len(lines) == MaxLines {
			continue
		}
		if k := len(lines); k > 0 && lines[k-1].Offset > ea-addr {
			continue // out of order: keep the table sorted
		}
		lines = append(lines, Line{Offset: ea - addr, File: file, Line: int(line)})
	}
	d.lines, d.linesAddr = lines, addr
	return nil
}

// plausibleFile reports whether a debug entry's name can be a file name:
// UTF-8 without control characters.
func plausibleFile(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
