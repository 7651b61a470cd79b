package cpython

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
)

// Limits of what Reader reads from a process.
const (
	// MaxString bounds a name or file name, in bytes read.
	MaxString = 4096
	// MaxLineTable bounds a code object's location table.
	MaxLineTable = 1 << 16
	// MaxCodes bounds the code objects a Reader remembers; past it, it
	// starts over.
	MaxCodes = 1 << 16
	// maxLasti bounds an instruction index: no code object is longer.
	maxLasti = 1 << 24
)

// Frame is a Python function, where it is in its source.
type Frame struct {
	Function string // co_qualname, co_name before 3.11
	File     string // co_filename
	Line     int    // 0 when unknown
}

// code is what Reader keeps of one code object.
type code struct {
	name, file string
	firstLine  int
	lines      []byte
	start      uint64 // address of the first instruction
	ok         bool
}

// Reader names the frames of one Python process from its memory.
type Reader struct {
	mem   io.ReaderAt
	proc  *Process
	order binary.ByteOrder
	codes map[uint64]*code
	buf   []byte
	// head is how much of a code object holds the fields read.
	head uint64
	// lineAt is the reader of the version's line table.
	lineAt func(table []byte, firstLine, lasti int) (int, bool)
}

// NewReader returns a Reader of the process whose memory is mem
// (/proc/PID/mem), whose interpreter is p.
func NewReader(mem io.ReaderAt, p *Process) *Reader {
	l := &p.Layout
	head := l.CodeAdaptive
	if head == NoField { // 3.9, 3.10: up to the last field read
		head = 0
		for _, off := range []uint64{l.ObType, l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLinetable, l.CodeFirstLineno, l.CodeCode} {
			if off != NoField && off+8 > head {
				head = off + 8
			}
		}
	}
	return &Reader{mem: mem, proc: p, order: binary.LittleEndian, codes: map[uint64]*code{}, head: head, lineAt: lineReader(p.Version)}
}

// Locate returns s with Instr the address of its instruction. The sampler
// records that address itself from 3.11 on; from 3.9 and 3.10 it records
// the frame's f_lasti, which the code object's co_code turns into an
// address, so that every instruction of every code object is a location of
// its own in a spliced stack (Sampled.Addr). s is returned as it is where
// its code object cannot be read: it has no name then.
func (r *Reader) Locate(s Sampled) Sampled {
	unit := int64(r.proc.Layout.FrameLastiUnit)
	if unit == 0 {
		return s
	}
	c := r.code(s.CodeAddr())
	lasti := int64(int32(uint32(s.Instr)))
	if !c.ok || c.start == 0 || lasti < -1 || lasti >= maxLasti {
		return s
	}
	// -1 (not started) is before the first code unit, as in Frame.
	s.Instr = c.start + uint64(max(lasti*unit, -2))
	return s
}

// Frame names the frame running code object codeAddr at instruction
// address instr (the sampler's record of it, through Locate); false when
// codeAddr is not a code object that can be read.
func (r *Reader) Frame(codeAddr, instr uint64) (Frame, bool) {
	c := r.code(codeAddr)
	if !c.ok {
		return Frame{}, false
	}
	f := Frame{Function: c.name, File: c.file}
	// Code units are 2 bytes. Before 3.13 the frame points at the
	// instruction executing (prev_instr, f_lasti), from 3.13 at the one
	// executing or, for a caller, the one its call returns to
	// (instr_ptr): both are the call's own line.
	lasti := (int64(instr) - int64(c.start)) / 2
	if lasti >= -1 && lasti < maxLasti {
		if line, ok := r.lineAt(c.lines, c.firstLine, int(lasti)); ok {
			f.Line = line
		}
	}
	return f, true
}

// code returns what the Reader knows of the code object at addr, read on
// first use.
func (r *Reader) code(addr uint64) *code {
	c := r.codes[addr]
	if c == nil {
		if len(r.codes) >= MaxCodes {
			clear(r.codes)
		}
		c = r.readCode(addr)
		r.codes[addr] = c
	}
	return c
}

// readCode reads the code object at addr; a code with ok false when it
// is not one.
func (r *Reader) readCode(addr uint64) *code {
	l := &r.proc.Layout
	c := &code{}
	head, err := r.read(addr, int(r.head))
	if err != nil || r.word(head, l.ObType) != r.proc.CodeType {
		return c
	}
	if l.CodeCode != NoField {
		if bytecode := r.word(head, l.CodeCode); bytecode != 0 {
			c.start = bytecode + l.BytesData
		}
	} else {
		c.start = addr + l.CodeAdaptive
	}
	c.firstLine = int(int32(r.order.Uint32(head[l.CodeFirstLineno:])))
	nameAt := l.CodeQualname
	if nameAt == NoField {
		nameAt = l.CodeName
	}
	// Each read reuses the buffer head is in: the pointers first.
	name, file, lines := r.word(head, nameAt), r.word(head, l.CodeFilename), r.word(head, l.CodeLinetable)
	if c.name, err = r.str(name); err != nil {
		return c
	}
	if c.file, err = r.str(file); err != nil {
		return c
	}
	c.lines, _ = r.bytesObject(lines)
	c.ok = true
	return c
}

func (r *Reader) word(b []byte, off uint64) uint64 {
	if off+8 > uint64(len(b)) {
		return 0
	}
	return r.order.Uint64(b[off:])
}

// read reads n bytes at addr into the Reader's buffer.
func (r *Reader) read(addr uint64, n int) ([]byte, error) {
	if addr == 0 || addr > 1<<56 {
		return nil, fmt.Errorf("address %#x: not a user address", addr)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := r.mem.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("reading %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}

// Unicode state bits (PyASCIIObject.state): kind in bits 2-4, compact in
// bit 5, ascii in bit 6, from 3.3 to 3.13.
const (
	stateKindShift = 2
	stateCompact   = 1 << 5
	stateASCII     = 1 << 6
)

// str reads the str object at addr. Only compact strings are read, as
// all that the compiler makes are.
func (r *Reader) str(addr uint64) (string, error) {
	l := &r.proc.Layout
	head, err := r.read(addr, int(l.CompactSize))
	if err != nil {
		return "", err
	}
	state := r.order.Uint32(head[l.UnicodeState:])
	length := r.word(head, l.UnicodeLength)
	kind := uint64(state >> stateKindShift & 7)
	data := l.CompactSize
	switch {
	case state&stateCompact == 0:
		return "", fmt.Errorf("str at %#x: not compact (state %#x)", addr, state)
	case state&stateASCII != 0:
		data, kind = l.ASCIISize, 1
	case kind != 1 && kind != 2 && kind != 4:
		return "", fmt.Errorf("str at %#x: kind %d at offset %d", addr, kind, l.UnicodeState)
	}
	if length > MaxString/kind {
		length = MaxString / kind
	}
	b, err := r.read(addr+data, int(length*kind))
	if err != nil {
		return "", err
	}
	switch kind {
	case 1:
		if state&stateASCII != 0 {
			return strings.ToValidUTF8(string(b), "\uFFFD"), nil
		}
		rs := make([]rune, len(b))
		for i, c := range b {
			rs[i] = rune(c)
		}
		return string(rs), nil
	case 2:
		u := make([]uint16, len(b)/2)
		for i := range u {
			u[i] = r.order.Uint16(b[2*i:])
		}
		return string(utf16.Decode(u)), nil
	}
	rs := make([]rune, len(b)/4)
	for i := range rs {
		rs[i] = rune(r.order.Uint32(b[4*i:]))
	}
	return strings.ToValidUTF8(string(rs), "\uFFFD"), nil
}

// bytesObject reads the bytes object at addr, up to MaxLineTable bytes.
func (r *Reader) bytesObject(addr uint64) ([]byte, error) {
	l := &r.proc.Layout
	head, err := r.read(addr, int(l.BytesData))
	if err != nil {
		return nil, err
	}
	n := r.word(head, l.BytesSize)
	if n > MaxLineTable {
		return nil, fmt.Errorf("bytes at %#x: size %d at offset %d beyond %d", addr, n, l.BytesSize, MaxLineTable)
	}
	b, err := r.read(addr+l.BytesData, int(n))
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}
