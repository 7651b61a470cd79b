package symbolize

import (
	"cmp"
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/sprof/sprof/sframe/cfi"
	"github.com/sprof/sprof/stacks"
)

// maxEHFrameBytes bounds the .eh_frame read for function starts: a large
// C++ binary's is a few MiB.
const maxEHFrameBytes = 64 << 20

// functionRange is where one function's code lies, from an FDE.
type functionRange struct{ start, end uint64 }

// functionRanges are the code ranges of a binary's .eh_frame FDEs, sorted
// by start: a stripped binary names no function, but its unwind table
// still says where each one begins. Addresses are the file's virtual
// addresses.
type functionRanges []functionRange

// loadFunctionRanges reads the FDEs of f's .eh_frame; nil when it has
// none or the section cannot be read. Overlapping FDEs keep the first.
func loadFunctionRanges(f *elf.File, fileSize int64) functionRanges {
	s := f.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || checkSection(s, fileSize, maxEHFrameBytes) != nil {
		return nil
	}
	data, err := s.Data()
	if err != nil {
		return nil
	}
	addrSize := uint8(8)
	if f.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	bases := cfi.Bases{Section: s.Addr}
	if t := f.Section(".text"); t != nil {
		bases.Text = t.Addr
	}
	if g := f.Section(".got"); g != nil {
		bases.Data = g.Addr
	}
	fr, err := cfi.Parse(cfi.Section{Kind: cfi.EHFrame, Data: data, Bases: bases, Order: f.ByteOrder, AddrSize: addrSize})
	if err != nil {
		return nil
	}
	out := make(functionRanges, 0, len(fr.FDEs))
	for _, fde := range fr.FDEs {
		if fde.Size > 0 && fde.End() > fde.Start {
			out = append(out, functionRange{fde.Start, fde.End()})
		}
	}
	slices.SortStableFunc(out, func(a, b functionRange) int { return cmp.Compare(a.start, b.start) })
	kept := out[:0]
	for _, r := range out {
		if n := len(kept); n == 0 || r.start >= kept[n-1].end {
			kept = append(kept, r)
		}
	}
	return slices.Clip(kept)
}

// find returns the start of the function that covers addr.
func (rs functionRanges) find(addr uint64) (uint64, bool) {
	i, _ := slices.BinarySearchFunc(rs, addr, func(r functionRange, a uint64) int {
		if r.start <= a {
			return -1
		}
		return 1
	})
	if i == 0 || addr >= rs[i-1].end {
		return 0, false
	}
	return rs[i-1].start, true
}

// unnamedFunction returns the frame of an address no symbol covers but an
// FDE does: `binary+0xoffset` with the file offset of the function's
// start, as sprof names an unsymbolized address, so that all the
// addresses of one function share one name and add up.
func (img *image) unnamedFunction(addr uint64, binary string) (stacks.Frame, bool) {
	start, ok := img.fdes.find(addr)
	if !ok {
		return stacks.Frame{}, false
	}
	off, ok := img.loads.FileOffset(start)
	if !ok {
		return stacks.Frame{}, false
	}
	return stacks.Frame{Function: fmt.Sprintf("%s+%#x", filepath.Base(binary), off)}, true
}
