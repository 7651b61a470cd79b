package sframe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// TestEncodeFixtures re-encodes every fixture's section in its own
// version at its own address and wants the bytes gas and ld wrote: the
// same header, FDEs and rows, with the same minimal field sizes. Only the
// order of the functions' row blocks in the FRE sub-section may differ
// (ld keeps the input sections' order, Encode the functions'). FLEX FDEs
// are not encoded.
func TestEncodeFixtures(t *testing.T) {
	for _, bin := range fixtures(t) {
		tab, err := Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		ef, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := sframeBytes(ef)
		ef.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := tab.Encode(tab.Header.Version, tab.Addr)
		if errors.Is(err, ErrUnsupported) && bin == "../testdata/sframe/flex-amd64-v3" {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		g, w := splitSection(t, got, tab), splitSection(t, want, tab)
		if !slices.EqualFunc(g, w, bytes.Equal) {
			t.Errorf("%s: encoded\n %x\nwant\n %x", bin, g, w)
		}
	}
}

// splitSection cuts a section into its header, its FDEs without their
// FRE offsets, and its row blocks in FDE order.
func splitSection(t *testing.T, data []byte, tab *Table) [][]byte {
	t.Helper()
	h := &tab.Header
	var order binary.ByteOrder = binary.LittleEndian
	if tab.BigEndian {
		order = binary.BigEndian
	}
	size := h.Version.fdeSize()
	freOffAt := uint64(8)
	if h.Version == Version3 {
		freOffAt = 12
	}
	freStart := headerSize + uint64(h.FREOff)
	parts := [][]byte{data[:headerSize]}
	var offs []uint64
	for i := uint64(0); i < uint64(h.NumFDEs); i++ {
		fde := slices.Clone(data[headerSize+i*size:][:size])
		offs = append(offs, uint64(order.Uint32(fde[freOffAt:])))
		clear(fde[freOffAt : freOffAt+4])
		parts = append(parts, fde)
	}
	sorted := append(slices.Sorted(slices.Values(offs)), uint64(h.FRELen))
	for _, o := range offs {
		next := sorted[slices.Index(sorted, o)+1]
		parts = append(parts, data[freStart+o:freStart+next])
	}
	return parts
}
