package gsym

import (
	"encoding/binary"
	"fmt"
	"math"
)

// byteOrder is what binary.LittleEndian and binary.BigEndian both are.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// writer appends a GSYM file's bytes in a chosen byte order.
type writer struct {
	b     []byte
	order byteOrder
	strpW int // 4 (V1) or 8 (V2)
	strs  *stringTable
	err   error
}

func (w *writer) u8(v uint8)   { w.b = append(w.b, v) }
func (w *writer) u16(v uint16) { w.b = w.order.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = w.order.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = w.order.AppendUint64(w.b, v) }

func (w *writer) uint(width int, v uint64) {
	switch width {
	case 1:
		w.u8(uint8(v))
	case 2:
		w.u16(uint16(v))
	case 4:
		w.u32(uint32(v))
	default:
		w.u64(v)
	}
}

func (w *writer) align(n int) {
	for len(w.b)%n != 0 {
		w.b = append(w.b, 0)
	}
}

func (w *writer) strp(s string) {
	off, ok := w.strs.offset(s)
	if !ok && w.err == nil {
		w.err = fmt.Errorf("gsym: string %q was not added to the string table", s)
	}
	w.uint(w.strpW, off)
}

// chunk writes an InfoType header, the body that body appends, and patches
// the body's length.
func (w *writer) chunk(t InfoType, body func() error) error {
	w.u32(uint32(t))
	at := len(w.b)
	w.u32(0)
	if err := body(); err != nil {
		return err
	}
	n := len(w.b) - at - 4
	if n > math.MaxUint32 {
		return fmt.Errorf("gsym: %v chunk of %d bytes exceeds 32 bits", t, n)
	}
	w.order.PutUint32(w.b[at:], uint32(n))
	return nil
}

// appendFunction encodes one FunctionInfo record; pad aligns it to 4 bytes
// first (records inside MergedFunctionsInfo are not padded).
func (w *writer) appendFunction(f *FunctionInfo, pad bool) error {
	if pad {
		w.align(4)
	}
	if f.Name == "" {
		return fmt.Errorf("gsym: function at 0x%x has no name", f.Range.Start)
	}
	if f.Range.Size() > math.MaxUint32 {
		return fmt.Errorf("gsym: function %s is %d bytes, more than 32 bits", f.Name, f.Range.Size())
	}
	w.u32(uint32(f.Range.Size()))
	w.strp(f.Name)
	if f.Lines != nil {
		if err := w.chunk(InfoLineTable, func() (err error) {
			w.b, err = appendLines(w.b, f.Lines, f.Range.Start)
			return err
		}); err != nil {
			return fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	if f.Inline != nil {
		if err := w.chunk(InfoInline, func() error { return w.appendInline(f.Inline, f.Range.Start) }); err != nil {
			return fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	if len(f.Merged) > 0 {
		if err := w.chunk(InfoMergedFunctions, func() error { return w.appendMerged(f.Merged) }); err != nil {
			return err
		}
	}
	if f.hasCalls || len(f.CallSites) > 0 {
		w.chunk(InfoCallSites, func() error {
			w.u32(uint32(len(f.CallSites)))
			for _, cs := range f.CallSites {
				w.u64(cs.ReturnOffset)
				w.u8(cs.Flags)
				w.u32(uint32(len(cs.MatchRegex)))
				for _, re := range cs.MatchRegex {
					w.strp(re)
				}
			}
			return nil
		})
	}
	w.u32(uint32(InfoEndOfList))
	w.u32(0)
	return w.err
}

func (w *writer) appendMerged(fs []FunctionInfo) error {
	w.u32(uint32(len(fs)))
	for i := range fs {
		at := len(w.b)
		w.u32(0)
		if err := w.appendFunction(&fs[i], false); err != nil {
			return err
		}
		w.order.PutUint32(w.b[at:], uint32(len(w.b)-at-4))
	}
	return nil
}

// stringTable is a GSYM string table under construction: "" at offset 0,
// then strings in first-insertion order, each once, with no suffix sharing,
// as LLVM writes it.
type stringTable struct {
	data []byte
	offs map[string]uint64
}

func newStringTable() *stringTable {
	return &stringTable{data: []byte{0}, offs: map[string]uint64{}}
}

func (t *stringTable) insert(s string) uint64 {
	if s == "" {
		return 0
	}
	if off, ok := t.offs[s]; ok {
		return off
	}
	off := uint64(len(t.data))
	t.data = append(t.data, s...)
	t.data = append(t.data, 0)
	t.offs[s] = off
	return off
}

func (t *stringTable) offset(s string) (uint64, bool) {
	if s == "" {
		return 0, true
	}
	off, ok := t.offs[s]
	return off, ok
}
