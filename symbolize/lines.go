package symbolize

import (
	"debug/dwarf"
	"errors"
	"path"
	"slices"
	"sort"
	"strings"
)

// maxLineRows bounds the rows kept for one binary (16 bytes each); a binary
// with more gets function names without lines rather than a huge table.
const maxLineRows = 8 << 20

var errTooManyRows = errors.New("too many line rows")

// lineTable is the DWARF line tables of one binary merged into one sorted
// array, so a lookup is a binary search without touching DWARF again.
type lineTable struct {
	rows  []lineRow
	files []string
}

type lineRow struct {
	addr uint64
	file uint32 // index into files, or endSequence
	line uint32
}

// endSequence marks the first address after a sequence of rows.
const endSequence = ^uint32(0)

// fileTable interns source file names across compilation units.
type fileTable struct {
	names []string
	index map[string]uint32
}

func (f *fileTable) intern(name string) uint32 {
	if i, ok := f.index[name]; ok {
		return i
	}
	if f.index == nil {
		f.index = make(map[string]uint32)
	}
	i := uint32(len(f.names))
	f.names = append(f.names, name)
	f.index[name] = i
	return i
}

// readDWARF reads the line programs (unless rows is false: Go programs
// have theirs in the pclntab) and inline trees of every compilation unit
// in one pass. Rows and inlined ranges outside code (functions the linker
// discarded, left at address 0) are dropped. Either table is nil when d
// has none of it; both are nil beyond maxLineRows.
func readDWARF(d *dwarf.Data, inCode func(addr uint64) bool, style Demangling, rows bool) (*lineTable, *inlineTable) {
	lt := &lineTable{}
	var files fileTable
	ib := newInlineBuilder(d, inCode, style)
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil || cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := d.LineReader(cu)
		var fileOf []uint32
		if err == nil && lr != nil {
			compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
			if fileOf, err = lt.addUnit(lr, compDir, &files, inCode, rows); errors.Is(err, errTooManyRows) {
				return nil, nil
			}
		}
		if !cu.Children {
			continue
		}
		if err := ib.walkUnit(r, fileOf); err != nil {
			break
		}
	}
	lt.files = files.names
	lt.finish()
	if len(lt.rows) == 0 {
		lt = nil
	}
	inl := ib.finish(files.names)
	return lt, inl
}

// addUnit appends the rows of one line program, if rows is set, and
// returns, for each of its file numbers, the index in files (for
// DW_AT_call_file).
func (t *lineTable) addUnit(lr *dwarf.LineReader, compDir string, files *fileTable, inCode func(uint64) bool, rows bool) ([]uint32, error) {
	fileIndex := func(f *dwarf.LineFile) uint32 {
		if f == nil {
			return files.intern("")
		}
		return files.intern(sourcePath(compDir, f.Name))
	}
	cuFiles := make(map[*dwarf.LineFile]uint32)
	var seq []lineRow
	var le dwarf.LineEntry
	for rows {
		if err := lr.Next(&le); err != nil {
			// io.EOF, or a broken program: the sequences ended before
			// it are kept, the one under way is dropped.
			break
		}
		if le.EndSequence {
			if len(seq) > 0 && inCode(seq[0].addr) {
				t.rows = append(t.rows, seq...)
				t.rows = append(t.rows, lineRow{addr: le.Address, file: endSequence})
			}
			seq = seq[:0]
			if len(t.rows) > maxLineRows {
				return nil, errTooManyRows
			}
			continue
		}
		fi, ok := cuFiles[le.File]
		if !ok {
			fi = fileIndex(le.File)
			cuFiles[le.File] = fi
		}
		seq = append(seq, lineRow{addr: le.Address, file: fi, line: uint32(max(le.Line, 0))})
	}
	lf := lr.Files()
	fileOf := make([]uint32, len(lf))
	for i, f := range lf {
		fileOf[i] = fileIndex(f)
	}
	return fileOf, nil
}

// finish sorts the rows. At one address the end of a sequence comes first,
// so a sequence that starts where another ends wins; then the order of the
// line program, of which the last row is the one a lookup finds.
func (t *lineTable) finish() {
	slices.SortStableFunc(t.rows, func(a, b lineRow) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		case a.file == endSequence && b.file != endSequence:
			return -1
		case b.file == endSequence && a.file != endSequence:
			return 1
		}
		return 0
	})
	out := t.rows[:0]
	for i, row := range t.rows {
		if i+1 < len(t.rows) && t.rows[i+1].addr == row.addr {
			continue
		}
		out = append(out, row)
	}
	t.rows = slices.Clip(out)
}

// sourcePath resolves a line table's file name against the compilation
// directory as LLVM does. debug/dwarf already joins names in DWARF 4 and
// names in directory 0 of DWARF 5, but leaves the other relative
// directories of DWARF 5 (../include) relative to nothing.
func sourcePath(compDir, name string) string {
	if name == "" || path.IsAbs(name) || compDir == "" {
		return name
	}
	dir := path.Clean(compDir)
	if name == dir || strings.HasPrefix(name, dir+"/") {
		return name
	}
	return path.Join(dir, name)
}

// lookup returns the source position of the instruction at addr.
func (t *lineTable) lookup(addr uint64) (file string, line int, ok bool) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 || t.rows[i].file == endSequence {
		return "", 0, false
	}
	return t.files[t.rows[i].file], int(t.rows[i].line), true
}

func (t *lineTable) size() int64 {
	n := int64(len(t.rows)) * 16
	for _, f := range t.files {
		n += int64(len(f)) + 16
	}
	return n
}
