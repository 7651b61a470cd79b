package convert

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sprof/sprof/symbolize/gsym"
)

// BreakpadStats counts what a Breakpad conversion read.
type BreakpadStats struct {
	Functions, Publics, Inlines int
}

// Limits on a Breakpad file, which may come from anywhere.
const (
	maxBreakpadLine  = 1 << 20
	maxInlineNesting = 256
)

// BreakpadFile converts the Breakpad symbol file at path.
func BreakpadFile(path string) (*gsym.Creator, BreakpadStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, BreakpadStats{}, err
	}
	defer f.Close()
	c, st, err := Breakpad(f)
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", path, err)
	}
	return c, st, nil
}

// Breakpad converts a Breakpad .sym file: FUNC records with their line
// records and INLINE records (named by INLINE_ORIGIN), and PUBLIC symbols
// as size-0 functions, which GSYM lookups extend to the next function.
// Addresses are module-relative, as dump_syms writes them. The result is
// finalized.
func Breakpad(r io.Reader) (*gsym.Creator, BreakpadStats, error) {
	p := &bpParser{c: gsym.NewCreator(), files: map[uint64]uint32{}, origins: map[uint64]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxBreakpadLine)
	for sc.Scan() {
		p.line++
		if err := p.record(strings.TrimRight(sc.Text(), "\r")); err != nil {
			return nil, p.st, fmt.Errorf("line %d: %w", p.line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, p.st, fmt.Errorf("line %d: %w", p.line+1, err)
	}
	p.flush()
	if p.c.NumFunctions() == 0 {
		return nil, p.st, fmt.Errorf("no FUNC or PUBLIC records")
	}
	if _, err := p.c.Finalize(); err != nil {
		return nil, p.st, err
	}
	return p.c, p.st, nil
}

type bpParser struct {
	c       *gsym.Creator
	st      BreakpadStats
	line    int
	files   map[uint64]uint32 // FILE number → GSYM file index
	origins map[uint64]string
	fn      *gsym.FunctionInfo
	inlines []bpInline
	haveID  bool
}

type bpInline struct {
	level  int
	node   gsym.InlineInfo
	origin uint64
}

func hexField(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// splitN splits s into n space-separated fields, the last taking the rest
// (names contain spaces).
func splitN(s string, n int) []string {
	f := strings.SplitN(s, " ", n)
	if len(f) < n {
		return nil
	}
	return f
}

// numbered parses "NUMBER TEXT", the body of FILE and INLINE_ORIGIN.
func numbered(kw, rest string) (uint64, string, error) {
	f := splitN(rest, 2)
	if f == nil {
		return 0, "", fmt.Errorf("malformed %s record", kw)
	}
	n, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return 0, "", fmt.Errorf("%s number: %w", kw, err)
	}
	return n, f[1], nil
}

func (p *bpParser) record(s string) error {
	kw, rest, _ := strings.Cut(s, " ")
	switch kw {
	case "MODULE":
		// MODULE os arch id name: the id (GUID and age) is the UUID unless
		// an INFO CODE_ID (the ELF build ID) follows.
		if f := splitN(rest, 4); f != nil {
			if id, err := hex.DecodeString(f[2]); err == nil && !p.haveID {
				p.c.SetUUID(id)
			}
		}
	case "INFO":
		if f := strings.Fields(rest); len(f) >= 2 && f[0] == "CODE_ID" {
			if id, err := hex.DecodeString(f[1]); err == nil {
				p.c.SetUUID(id)
				p.haveID = true
			}
		}
	case "FILE":
		n, path, err := numbered(kw, rest)
		if err != nil {
			return err
		}
		p.files[n] = p.c.InsertFile(path)
	case "INLINE_ORIGIN":
		n, name, err := numbered(kw, rest)
		if err != nil {
			return err
		}
		p.origins[n] = name
	case "FUNC":
		p.flush()
		rest = strings.TrimPrefix(rest, "m ")
		f := splitN(rest, 4)
		if f == nil {
			return fmt.Errorf("malformed FUNC record")
		}
		addr, err1 := hexField(f[0])
		size, err2 := hexField(f[1])
		if err1 != nil || err2 != nil || addr+size < addr {
			return fmt.Errorf("bad FUNC address or size")
		}
		p.fn = &gsym.FunctionInfo{Range: gsym.Range{Start: addr, End: addr + size}, Name: f[3]}
		p.st.Functions++
	case "PUBLIC":
		p.flush()
		rest = strings.TrimPrefix(rest, "m ")
		f := splitN(rest, 3)
		if f == nil {
			return fmt.Errorf("malformed PUBLIC record")
		}
		addr, err := hexField(f[0])
		if err != nil {
			return fmt.Errorf("PUBLIC address: %w", err)
		}
		p.c.AddFunction(gsym.FunctionInfo{Range: gsym.Range{Start: addr, End: addr}, Name: f[2]})
		p.st.Publics++
	case "INLINE":
		if p.fn == nil {
			return fmt.Errorf("INLINE record outside a FUNC")
		}
		return p.inline(rest)
	case "STACK", "":
		p.flush()
	default:
		if p.fn == nil {
			return nil // unknown record type: ignore, as Breakpad's readers do
		}
		return p.lineRecord(s)
	}
	return nil
}

// lineRecord adds "ADDR SIZE LINE FILENUM" to the current function.
func (p *bpParser) lineRecord(s string) error {
	f := strings.Fields(s)
	if len(f) != 4 {
		return fmt.Errorf("malformed line record")
	}
	addr, err1 := hexField(f[0])
	line, err2 := strconv.ParseUint(f[2], 10, 32)
	fileNum, err3 := strconv.ParseUint(f[3], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("malformed line record")
	}
	file, ok := p.files[fileNum]
	if !ok {
		return fmt.Errorf("line record names unknown FILE %d", fileNum)
	}
	if !p.fn.Range.Contains(addr) {
		return nil
	}
	if p.fn.Lines == nil {
		p.fn.Lines = []gsym.LineEntry{}
	}
	if n := len(p.fn.Lines); n > 0 && p.fn.Lines[n-1].File == file && p.fn.Lines[n-1].Line == uint32(line) {
		return nil
	}
	p.fn.Lines = append(p.fn.Lines, gsym.LineEntry{Addr: addr, File: file, Line: uint32(line)})
	return nil
}

// inline reads "LEVEL CALL_LINE CALL_FILE ORIGIN (ADDR SIZE)+".
func (p *bpParser) inline(rest string) error {
	f := strings.Fields(rest)
	if len(f) < 6 || len(f)%2 != 0 {
		return fmt.Errorf("malformed INLINE record")
	}
	var v [4]uint64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(f[i], 10, 32); err != nil {
			return fmt.Errorf("malformed INLINE record")
		}
	}
	if v[0] > maxInlineNesting {
		return fmt.Errorf("INLINE nesting level %d too deep", v[0])
	}
	in := bpInline{level: int(v[0]), origin: v[3]}
	in.node.CallLine = uint32(v[1])
	if file, ok := p.files[v[2]]; ok {
		in.node.CallFile = file
	}
	for i := 4; i < len(f); i += 2 {
		addr, err1 := hexField(f[i])
		size, err2 := hexField(f[i+1])
		if err1 != nil || err2 != nil || addr+size < addr {
			return fmt.Errorf("bad INLINE range")
		}
		in.node.Ranges = gsym.AddRange(in.node.Ranges, gsym.Range{Start: addr, End: addr + size})
	}
	p.inlines = append(p.inlines, in)
	p.st.Inlines++
	return nil
}

// flush adds the current function with its inline tree.
func (p *bpParser) flush() {
	if p.fn == nil {
		return
	}
	if len(p.inlines) > 0 {
		top := &gsym.InlineInfo{Ranges: []gsym.Range{p.fn.Range}, Name: p.fn.Name}
		// path[k] is the innermost open node at nesting level k-1.
		path := []*gsym.InlineInfo{top}
		for i := range p.inlines {
			in := &p.inlines[i]
			if in.level+1 > len(path) {
				continue // a level skipped: malformed, drop the record
			}
			path = path[:in.level+1]
			parent := path[in.level]
			in.node.Name = p.origins[in.origin]
			keep := in.node.Ranges[:0]
			for _, r := range in.node.Ranges {
				if gsym.RangesContainRange(parent.Ranges, r) {
					keep = append(keep, r)
				}
			}
			if in.node.Ranges = keep; len(keep) == 0 {
				continue
			}
			parent.Children = append(parent.Children, in.node)
			path = append(path, &parent.Children[len(parent.Children)-1])
		}
		if len(top.Children) > 0 {
			p.fn.Inline = top
		}
	}
	if p.fn.Range.Size() > 0 {
		p.c.AddFunction(*p.fn)
	}
	p.fn, p.inlines = nil, p.inlines[:0]
}
