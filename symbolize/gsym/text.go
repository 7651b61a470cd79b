package gsym

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// AppendText appends the result in llvm-gsymutil's lookup format: the
// address, then one line per inline level, innermost first, callers
// indented by 20 spaces and marked "[inlined]" except the outermost.
func (lr *LookupResult) AppendText(b []byte) []byte {
	b = appendHex64(b, lr.Addr)
	b = append(b, ": "...)
	for i := range lr.Locations {
		if i > 0 {
			b = append(b, "\n                    "...)
		}
		b = lr.Locations[i].appendText(b)
		if i+1 != len(lr.Locations) {
			b = append(b, " [inlined]"...)
		}
	}
	return append(b, '\n')
}

// AppendLookupError appends a failed lookup of addr as llvm-gsymutil
// prints it.
func AppendLookupError(b []byte, addr uint64, err error) []byte {
	b = appendHex64(b, addr)
	b = append(b, ": error: "...)
	var nf *notFoundError
	if !errors.As(err, &nf) {
		b = append(b, err.Error()...)
		return append(b, '\n')
	}
	b = append(b, "address 0x"...)
	b = strconv.AppendUint(b, addr, 16)
	if nf.inLineTable {
		return append(b, " is not in the line table\n"...)
	}
	return append(b, " is not in GSYM\n"...)
}

// appendHex64 appends v as "0x" and 16 hex digits.
func appendHex64(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, "0x"...)
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>uint(shift)&0xf])
	}
	return b
}

func (l *SourceLocation) appendText(b []byte) []byte {
	b = append(b, l.Name...)
	if l.Offset > 0 {
		b = append(b, " + "...)
		b = strconv.AppendUint(b, l.Offset, 10)
	}
	if l.Dir == "" && l.Base == "" {
		return b
	}
	b = append(b, " @ "...)
	b = l.appendPath(b)
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(l.Line), 10)
}

// Path joins Dir and Base as llvm-gsymutil prints them ("<invalid-file>"
// stands for a missing base name).
func (l *SourceLocation) Path() string {
	if l.Dir == "" && l.Base != "" {
		return l.Base
	}
	return string(l.appendPath(nil))
}

func (l *SourceLocation) appendPath(b []byte) []byte {
	if l.Dir != "" {
		b = append(b, l.Dir...)
		if strings.IndexByte(l.Dir, '/') < 0 && strings.IndexByte(l.Dir, '\\') >= 0 {
			b = append(b, '\\')
		} else {
			b = append(b, '/')
		}
	}
	if l.Base == "" {
		return append(b, "<invalid-file>"...)
	}
	return append(b, l.Base...)
}

// Dump writes a human-readable listing of the whole file: header, tables
// and every FunctionInfo, in the layout of llvm-gsymutil's dump.
func (r *Reader) Dump(w io.Writer) error {
	h := &r.hdr
	fmt.Fprintf(w, "Header:\n  Magic        = 0x%08x\n  Version      = 0x%04x\n  AddrOffSize  = 0x%02x\n", Magic, h.Version, h.AddrOffSize)
	if h.Version == 1 {
		fmt.Fprintf(w, "  UUIDSize     = 0x%02x\n", len(h.UUID))
	}
	fmt.Fprintf(w, "  BaseAddress  = 0x%016x\n  NumAddresses = 0x%08x\n", h.BaseAddress, h.NumAddresses)
	fmt.Fprintf(w, "  StrtabOffset = 0x%08x\n  StrtabSize   = 0x%08x\n", h.StrtabOffset, h.StrtabSize)
	if h.Version == 1 || len(h.UUID) > 0 {
		fmt.Fprintf(w, "  UUID         = %x\n", h.UUID)
	}
	fmt.Fprintf(w, "\nAddress Table:\nINDEX  OFFSET%d (ADDRESS)\n====== =============================== \n", 8*int(h.AddrOffSize))
	for i := 0; i < r.NumFunctions(); i++ {
		fmt.Fprintf(w, "[%4d] 0x%0*x (0x%016x)\n", i, 2*int(h.AddrOffSize), r.addrOffset(i), r.Address(i))
	}
	fmt.Fprintf(w, "\nAddress Info Offsets:\nINDEX  Offset\n====== ==========\n")
	for i := 0; i < r.NumFunctions(); i++ {
		fmt.Fprintf(w, "[%4d] 0x%08x\n", i, r.infoOffset(i))
	}
	fmt.Fprintf(w, "\nFiles:\nINDEX  DIRECTORY  BASENAME   PATH\n====== ========== ========== ==============================\n")
	for i := uint32(0); i < r.numFiles; i++ {
		d, b, _ := r.file(i)
		path := ""
		if d != 0 || b != 0 {
			loc := SourceLocation{Dir: r.String(d), Base: r.String(b)}
			path = loc.Path()
		}
		fmt.Fprintf(w, "[%4d] 0x%08x 0x%08x %s\n", i, d, b, path)
	}
	fmt.Fprintf(w, "\nString table:\n")
	for off := 0; off < len(r.strtab); {
		end := off
		for end < len(r.strtab) && r.strtab[end] != 0 {
			end++
		}
		fmt.Fprintf(w, "0x%08x: %q\n", off, r.strtab[off:end])
		off = end + 1
	}
	fmt.Fprintln(w)
	for i := 0; i < r.NumFunctions(); i++ {
		f, err := r.FunctionInfo(i)
		if err != nil {
			fmt.Fprintf(w, "FunctionInfo @ 0x%08x: error: %v\n", r.infoOffset(i), err)
			continue
		}
		fmt.Fprintf(w, "FunctionInfo @ 0x%08x: ", r.infoOffset(i))
		r.dumpFunction(w, &f, "")
	}
	return nil
}

func (r *Reader) dumpFunction(w io.Writer, f *FunctionInfo, indent string) {
	fmt.Fprintf(w, "%s %q\n", f.Range, f.Name)
	if f.Lines != nil {
		fmt.Fprintf(w, "%sLineTable:\n", indent)
		for _, row := range f.Lines {
			fmt.Fprintf(w, "%s  0x%016x %s:%d\n", indent, row.Addr, r.filePath(row.File), row.Line)
		}
	}
	if f.Inline != nil {
		fmt.Fprintf(w, "%sInlineInfo:\n", indent)
		r.dumpInline(w, f.Inline, indent)
	}
	if f.hasCalls {
		fmt.Fprintf(w, "%sCallSites (by relative return offset):\n", indent)
		for _, cs := range f.CallSites {
			fmt.Fprintf(w, "%s  0x%04x Flags[%s]", indent, cs.ReturnOffset, callSiteFlags(cs.Flags))
			if len(cs.MatchRegex) > 0 {
				fmt.Fprintf(w, " MatchRegex[%s]", strings.Join(cs.MatchRegex, ","))
			}
			fmt.Fprintln(w)
		}
	}
	for i := range f.Merged {
		fmt.Fprintf(w, "%s++ Merged FunctionInfos[%d]:\n%s    ", indent, i, indent)
		r.dumpFunction(w, &f.Merged[i], indent+"    ")
	}
}

// callSiteFlags names CallSite flags as llvm-gsymutil prints them.
func callSiteFlags(f uint8) string {
	if f == 0 {
		return "None"
	}
	var names []string
	for bit, name := range []string{"InternalCall", "ExternalCall"} {
		if f&(1<<bit) != 0 {
			names = append(names, name)
		}
	}
	if rest := f &^ 3; rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", rest))
	}
	return strings.Join(names, " | ")
}

func (r *Reader) dumpInline(w io.Writer, n *InlineInfo, indent string) {
	fmt.Fprint(w, indent)
	for i, rg := range n.Ranges {
		if i > 0 {
			fmt.Fprint(w, " ")
		}
		fmt.Fprint(w, rg)
	}
	fmt.Fprintf(w, " %s", n.Name)
	if n.CallFile != 0 {
		fmt.Fprintf(w, " called from %s:%d", r.filePath(n.CallFile), n.CallLine)
	}
	fmt.Fprintln(w)
	for i := range n.Children {
		r.dumpInline(w, &n.Children[i], indent+"  ")
	}
}

func (r *Reader) filePath(i uint32) string {
	d, b, ok := r.File(i)
	if !ok {
		return fmt.Sprintf("<invalid file %d>", i)
	}
	loc := SourceLocation{Dir: d, Base: b}
	return loc.Path()
}
