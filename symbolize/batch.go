package symbolize

import "github.com/sprof/sprof/stacks"

// BatchSymbolizer is a Symbolizer that resolves many addresses of one
// binary together faster than one at a time (the GSYM symbolizer sorts
// them and reads its file in order). A profile's locations are
// symbolized per binary, so the report uses it through SymbolizeAll.
type BatchSymbolizer interface {
	Symbolizer
	// SymbolizeBatch calls fn with the frames of each file offset of
	// offs in b, innermost inline level first, empty when no symbol
	// covers it, in any order; frames are reused once fn returns. An
	// error means b could not be read, or not all of it; fn has then
	// been called for the offsets that were symbolized.
	SymbolizeBatch(b Binary, offs []uint64, fn func(i int, frames []stacks.Frame)) error
}

// SymbolizeAll symbolizes offs of b with s, in one batch when s is a
// BatchSymbolizer, else one offset at a time; fn is as for
// SymbolizeBatch. The one-at-a-time path stops at the first error.
func SymbolizeAll(s Symbolizer, b Binary, offs []uint64, fn func(i int, frames []stacks.Frame)) error {
	if bs, ok := s.(BatchSymbolizer); ok {
		return bs.SymbolizeBatch(b, offs, fn)
	}
	var frames []stacks.Frame
	for i, off := range offs {
		var err error
		if frames, err = s.Symbolize(frames[:0], b, off); err != nil {
			return err
		}
		fn(i, frames)
	}
	return nil
}
