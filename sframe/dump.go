package sframe

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText writes the table the way `readelf --sframe` of the binutils
// release that produces its version prints it (2.40 for V1, 2.44 for V2,
// 2.47 for V3): the header, then per function its PC, size and rows with
// the CFA, FP and RA rules. FDEs left out as invalid are not printed: a
// count of them and of the unsupported ones among them, then their
// errors, follow the functions.
func (t *Table) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	h := &t.Header
	fmt.Fprintf(bw, "Contents of the SFrame section .sframe:\n  Header :\n\n")
	fmt.Fprintf(bw, "    Version: %v\n", h.Version)
	flags := "NONE"
	if names := h.Flags.Names(); len(names) > 0 {
		flags = strings.Join(names, ",\n           ")
	}
	fmt.Fprintf(bw, "    Flags: %s\n", flags)
	if h.Version >= Version2 {
		if h.CFAFixedFPOffset != 0 {
			fmt.Fprintf(bw, "    CFA fixed FP offset: %d\n", h.CFAFixedFPOffset)
		}
		if h.CFAFixedRAOffset != 0 {
			fmt.Fprintf(bw, "    CFA fixed RA offset: %d\n", h.CFAFixedRAOffset)
		}
	}
	fmt.Fprintf(bw, "    Num FDEs: %d\n    Num FREs: %d\n\n  Function Index :\n", h.NumFDEs, h.NumFREs)
	for i := range t.fdes {
		f := &t.fdes[i]
		fmt.Fprintf(bw, "\n    func idx [%d]: pc = %#x, size = %d bytes", i, f.Start, f.Size)
		if attr := t.attrs(f); attr != "" {
			fmt.Fprintf(bw, ", attr = %q", attr)
		}
		startpc := "STARTPC"
		if f.PCMask() {
			startpc = "STARTPC[m]"
		}
		fmt.Fprintf(bw, "\n    %-16s%-10s%-10s%-13s\n", startpc, "CFA", "FP", "RA")
		for _, r := range t.Rows(f) {
			pc := uint64(r.Start)
			if !f.PCMask() {
				pc += f.Start
			}
			if r.Outermost() {
				fmt.Fprintf(bw, "    %016x  RA undefined\n", pc)
				continue
			}
			fmt.Fprintf(bw, "    %016x  %-10s%-10s%-13s\n", pc, t.textSaved(r.CFA), t.textFP(&r), t.textRA(&r))
		}
	}
	if n := len(t.Errors); n > 0 {
		s := "s"
		if n == 1 {
			s = ""
		}
		fmt.Fprintf(bw, "\n  %d FDE%s left out, %d of them unsupported:\n", n, s, t.Unsupported())
		for _, err := range t.Errors {
			fmt.Fprintf(bw, "    %v\n", err)
		}
	}
	return bw.Flush()
}

// attrs returns readelf's letters for the FDE attributes: S for a signal
// trampoline, F for a FLEX FDE.
func (t *Table) attrs(f *FDE) string {
	var s string
	if f.Signal() {
		s += "S"
	}
	if t.Header.Version == Version3 && f.Type() == FDETypeFlex {
		s += "F"
	}
	return s
}

// textSaved prints a rule as readelf does: "u" when unchanged, "c-16" at
// an offset from the CFA, "sp+16" register-relative, "(fp-8)" read
// through a register.
func (t *Table) textSaved(l Loc) string {
	switch l.Kind {
	case LocCFA:
		return fmt.Sprintf("c%+d", l.Off)
	case LocReg:
		s := fmt.Sprintf("%s%+d", t.arch.RegName(l.Reg), l.Off)
		if l.Deref {
			return "(" + s + ")"
		}
		return s
	}
	return "u"
}

func (t *Table) textFP(r *Row) string {
	if r.padFP {
		return "U"
	}
	return t.textSaved(r.FP)
}

func (t *Table) textRA(r *Row) string {
	var s string
	switch {
	case r.padRA:
		s = "U"
	case r.RA.Kind == LocCFA && t.Header.CFAFixedRAOffset != 0 && r.RA.Off == int32(t.Header.CFAFixedRAOffset):
		// The ABI's fixed RA slot: readelf 2.44 and later mark it "f",
		// 2.40 (V1) prints it as if it were not tracked.
		s = "u"
		if t.Header.Version >= Version2 {
			s = "f"
		}
	default:
		s = t.textSaved(r.RA)
	}
	if r.Mangled() {
		s += "[s]"
	}
	return s
}

// The JSON form of a table, as `sprof sframe dump --json` prints it.
// Addresses are hexadecimal strings, so that no consumer rounds them.
type (
	jsonTable struct {
		Version          uint8          `json:"version"`
		Flags            []string       `json:"flags"`
		ABI              string         `json:"abi"`
		BigEndian        bool           `json:"big_endian"`
		CFAFixedFPOffset int8           `json:"cfa_fixed_fp_offset"`
		CFAFixedRAOffset int8           `json:"cfa_fixed_ra_offset"`
		SectionAddr      string         `json:"section_addr"`
		NumFDEs          uint32         `json:"num_fdes"`
		NumFREs          uint32         `json:"num_fres"`
		Functions        []jsonFunction `json:"functions"`
		Errors           []string       `json:"errors"`
		Unsupported      int            `json:"unsupported"`
	}
	jsonFunction struct {
		PC      string    `json:"pc"`
		Size    uint32    `json:"size"`
		PCType  string    `json:"pc_type"`
		RepSize uint8     `json:"rep_size,omitempty"`
		Type    string    `json:"type"`
		PACKey  string    `json:"pac_key,omitempty"`
		Signal  bool      `json:"signal"`
		Rows    []jsonRow `json:"rows"`
	}
	jsonRow struct {
		Start     string  `json:"start"`
		Outermost bool    `json:"outermost"`
		CFA       jsonLoc `json:"cfa"`
		RA        jsonLoc `json:"ra"`
		RASigned  bool    `json:"ra_signed"`
		FP        jsonLoc `json:"fp"`
	}
	jsonLoc struct {
		Rule   string `json:"rule"`
		Reg    string `json:"reg,omitempty"`
		Offset int32  `json:"offset"`
		Deref  bool   `json:"deref"`
	}
)

// WriteJSON writes the table as one JSON object:
//
//	version, flags (names), abi, big_endian, cfa_fixed_fp_offset,
//	cfa_fixed_ra_offset, section_addr, num_fdes, num_fres,
//	functions: [{pc, size, pc_type ("inc" or "mask"), rep_size,
//	    type ("default" or "flex"), pac_key ("A" or "B"; aarch64 only,
//	    where return addresses may be signed), signal,
//	    rows: [{start, outermost, cfa, ra, ra_signed, fp}]}],
//	errors: [messages of the FDEs left out],
//	unsupported: how many of those use constructs this package does not
//	    model (Table.Unsupported)
//
// A row's start is an address, or for pc_type "mask" an offset in the
// repeated block. cfa, ra and fp are rules {rule, reg, offset, deref}
// where rule is "same" (unchanged; for ra: still in the link register),
// "undefined", "cfa" (CFA+offset) or "reg" (register reg + offset), and
// deref says the value is the word at that address.
func (t *Table) WriteJSON(w io.Writer) error {
	h := &t.Header
	out := jsonTable{
		Version:          uint8(h.Version),
		Flags:            h.Flags.Names(),
		ABI:              h.ABI.String(),
		BigEndian:        t.BigEndian,
		CFAFixedFPOffset: h.CFAFixedFPOffset,
		CFAFixedRAOffset: h.CFAFixedRAOffset,
		SectionAddr:      fmt.Sprintf("%#x", t.Addr),
		NumFDEs:          h.NumFDEs,
		NumFREs:          h.NumFREs,
		Functions:        make([]jsonFunction, 0, len(t.fdes)),
		Errors:           make([]string, 0, len(t.Errors)),
		Unsupported:      t.Unsupported(),
	}
	if out.Flags == nil {
		out.Flags = []string{}
	}
	for i := range t.fdes {
		f := &t.fdes[i]
		jf := jsonFunction{
			PC: fmt.Sprintf("%#x", f.Start), Size: f.Size, PCType: "inc",
			Type: "default", Signal: f.Signal(),
			Rows: make([]jsonRow, 0, f.nrows),
		}
		if f.PCMask() {
			jf.PCType, jf.RepSize = "mask", f.RepSize
		}
		if h.Version == Version3 && f.Type() == FDETypeFlex {
			jf.Type = "flex"
		}
		if t.Arch() == ArchARM64 {
			jf.PACKey = "A"
			if f.PACKeyB() {
				jf.PACKey = "B"
			}
		}
		for _, r := range t.Rows(f) {
			start := uint64(r.Start)
			if !f.PCMask() {
				start += f.Start
			}
			jf.Rows = append(jf.Rows, jsonRow{
				Start:     fmt.Sprintf("%#x", start),
				Outermost: r.Outermost(),
				CFA:       t.jsonLoc(r.CFA),
				RA:        t.jsonLoc(r.RA),
				RASigned:  r.Mangled(),
				FP:        t.jsonLoc(r.FP),
			})
		}
		out.Functions = append(out.Functions, jf)
	}
	for _, err := range t.Errors {
		out.Errors = append(out.Errors, err.Error())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func (t *Table) jsonLoc(l Loc) jsonLoc {
	j := jsonLoc{Rule: l.Kind.String(), Offset: l.Off, Deref: l.Deref}
	if l.Kind == LocReg {
		j.Reg = t.arch.RegName(l.Reg)
	}
	return j
}
