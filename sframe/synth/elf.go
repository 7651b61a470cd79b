package synth

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/cfi"

	"github.com/sprof/sprof/internal/elfx"
)

// ErrNoCFI is returned by FromELF for a file without .eh_frame and
// .debug_frame.
var ErrNoCFI = errors.New("no .eh_frame or .debug_frame")

// maxSectionSize bounds what FromELF reads of one section (libc's
// .eh_frame is about 0.2 MiB, a large C++ binary's a few MiB).
const maxSectionSize = 256 << 20

// FromELF synthesizes the SFrame table of a linked ELF file (amd64 or
// aarch64) from its .eh_frame, found by section name or, in a file without
// section headers, through PT_GNU_EH_FRAME, and from its .debug_frame for
// code .eh_frame does not describe. When .eh_frame_hdr has a search
// table, it is checked against .eh_frame (Stats.HdrChecked; a mismatch is
// in Stats.Errors, the table is built from .eh_frame all the same).
// FDEs outside the executable PT_LOAD segments are left out
// (Stats.OutsideCode). Addresses are the file's virtual addresses.
func FromELF(f *elf.File) (t *sframe.Table, st Stats, err error) {
	err = elfx.Contain("synth", func() error {
		t, st, err = fromELF(f)
		return err
	})
	if err != nil {
		return nil, st, err
	}
	return t, st, nil
}

func fromELF(f *elf.File) (t *sframe.Table, st Stats, err error) {
	abi, addrSize, err := elfABI(f)
	if err != nil {
		return nil, st, err
	}
	bases := cfi.Bases{}
	if s := f.Section(".text"); s != nil {
		bases.Text = s.Addr
	}
	if s := f.Section(".got"); s != nil {
		bases.Data = s.Addr
	}
	var frames []*cfi.Frame
	eh, ehAddr, err := ehFrame(f)
	if err != nil {
		return nil, st, err
	}
	var hdrErr error
	hdrChecked := false
	if eh != nil {
		b := bases
		b.Section = ehAddr
		fr, err := cfi.Parse(cfi.Section{Kind: cfi.EHFrame, Data: eh, Bases: b, Order: f.ByteOrder, AddrSize: addrSize})
		if err != nil {
			return nil, st, fmt.Errorf("synth: .eh_frame: %w", err)
		}
		frames = append(frames, fr)
		hdrChecked, hdrErr = checkHdr(f, fr, ehAddr, addrSize)
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := sectionData(s)
		if err != nil {
			return nil, st, fmt.Errorf("synth: .debug_frame: %w", err)
		}
		b := bases
		b.Section = 0 // not loaded; its addresses are absolute
		fr, err := cfi.Parse(cfi.Section{Kind: cfi.DebugFrame, Data: data, Bases: b, Order: f.ByteOrder, AddrSize: addrSize})
		if err != nil {
			return nil, st, fmt.Errorf("synth: .debug_frame: %w", err)
		}
		frames = append(frames, fr)
	}
	if len(frames) == 0 {
		return nil, st, fmt.Errorf("synth: %w", ErrNoCFI)
	}
	t, st, err = synthesize(abi, func(start, end uint64) bool { return sframe.InExecutable(f.Progs, start, end) }, frames)
	st.HdrChecked = hdrChecked
	if hdrErr != nil {
		st.addError(fmt.Errorf("synth: .eh_frame_hdr: %w", hdrErr))
	}
	return t, st, err
}

func elfABI(f *elf.File) (sframe.ABI, uint8, error) {
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return 0, 0, fmt.Errorf("synth: ELF type %v, want a linked executable or shared object", f.Type)
	}
	if f.Class != elf.ELFCLASS64 {
		return 0, 0, fmt.Errorf("synth: %v: %w", f.Class, sframe.ErrUnsupported)
	}
	switch {
	case f.Machine == elf.EM_X86_64 && f.ByteOrder == binary.LittleEndian:
		return sframe.ABIAMD64LE, 8, nil
	case f.Machine == elf.EM_AARCH64 && f.ByteOrder == binary.LittleEndian:
		return sframe.ABIAArch64LE, 8, nil
	case f.Machine == elf.EM_AARCH64:
		return sframe.ABIAArch64BE, 8, nil
	}
	return 0, 0, fmt.Errorf("synth: machine %v: %w", f.Machine, sframe.ErrUnsupported)
}

// ehFrame returns the bytes and address of .eh_frame, or nil if the file
// has none. Without section headers it follows PT_GNU_EH_FRAME to
// .eh_frame_hdr and its pointer to .eh_frame, whose bytes run to the end
// of the segment at most (the parse stops at its zero terminator).
func ehFrame(f *elf.File) ([]byte, uint64, error) {
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := sectionData(s)
		if err != nil {
			return nil, 0, fmt.Errorf("synth: .eh_frame: %w", err)
		}
		return data, s.Addr, nil
	}
	if len(f.Sections) > 1 {
		return nil, 0, nil
	}
	hdrProg := prog(f, elf.PT_GNU_EH_FRAME)
	if hdrProg == nil {
		return nil, 0, nil
	}
	hdrData, err := readCapped(hdrProg.Open(), hdrProg.Filesz)
	if err != nil {
		return nil, 0, fmt.Errorf("synth: PT_GNU_EH_FRAME: %w", err)
	}
	hdr, err := cfi.ParseHdr(hdrData, hdrProg.Vaddr, f.ByteOrder, 8)
	if err != nil {
		return nil, 0, fmt.Errorf("synth: PT_GNU_EH_FRAME: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || hdr.EHFramePtr < p.Vaddr || hdr.EHFramePtr-p.Vaddr >= p.Filesz {
			continue
		}
		off := hdr.EHFramePtr - p.Vaddr
		n := min(p.Filesz-off, maxSectionSize)
		data, err := readCapped(io.NewSectionReader(p, int64(off), int64(n)), n)
		if err != nil {
			return nil, 0, fmt.Errorf("synth: .eh_frame through PT_GNU_EH_FRAME: %w", err)
		}
		return data, hdr.EHFramePtr, nil
	}
	return nil, 0, fmt.Errorf("synth: .eh_frame at %#x is in no PT_LOAD segment", hdr.EHFramePtr)
}

// checkHdr checks .eh_frame_hdr's search table, if there is one, against
// the parsed .eh_frame.
func checkHdr(f *elf.File, fr *cfi.Frame, ehAddr uint64, addrSize uint8) (bool, error) {
	var data []byte
	var addr uint64
	if s := f.Section(".eh_frame_hdr"); s != nil && s.Type != elf.SHT_NOBITS {
		d, err := sectionData(s)
		if err != nil {
			return false, err
		}
		data, addr = d, s.Addr
	} else if p := prog(f, elf.PT_GNU_EH_FRAME); p != nil {
		d, err := readCapped(p.Open(), p.Filesz)
		if err != nil {
			return false, err
		}
		data, addr = d, p.Vaddr
	} else {
		return false, nil
	}
	hdr, err := cfi.ParseHdr(data, addr, f.ByteOrder, addrSize)
	if err != nil {
		return false, err
	}
	if hdr.Count == 0 {
		return false, nil
	}
	if err := hdr.Check(fr, ehAddr); err != nil {
		return false, err
	}
	return true, nil
}

func prog(f *elf.File, typ elf.ProgType) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == typ {
			return p
		}
	}
	return nil
}

// sectionData reads a section, decompressing it if needed, up to
// maxSectionSize bytes.
func sectionData(s *elf.Section) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 && s.Size > maxSectionSize {
		return nil, fmt.Errorf("%d bytes, more than the %d this reader accepts", s.Size, maxSectionSize)
	}
	var hint uint64
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		hint = s.Size
	}
	return readCappedHint(s.Open(), hint, maxSectionSize)
}

// readCapped reads r to its end, failing past max bytes.
func readCapped(r io.Reader, max uint64) ([]byte, error) { return readCappedHint(r, max, max) }

// maxHint bounds the buffer readCappedHint allocates ahead: a header's
// size is only a claim.
const maxHint = 16 << 20

// readCappedHint is readCapped for data of about hint bytes, read into a
// buffer of that size rather than one that grows by doubling.
func readCappedHint(r io.Reader, hint, max uint64) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(int(min(hint, max, maxHint)) + bytes.MinRead)
	n, err := io.Copy(&buf, io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if uint64(n) > max {
		return nil, fmt.Errorf("more than the %d bytes this reader accepts", max)
	}
	return buf.Bytes(), nil
}
