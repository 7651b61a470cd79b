package symbolize

import (
	"debug/dwarf"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
)

// maxLineRows bounds the rows kept for one binary (16 bytes each); a binary
// with more gets function names without lines rather than a huge table.
const maxLineRows = 8 << 20

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

// newLineTable reads every compilation unit's line program. Sequences that
// do not start in code (functions the linker discarded, left at address 0)
// are dropped. It returns nil when d has no line rows or more than
// maxLineRows.
func newLineTable(d *dwarf.Data, inCode func(addr uint64) bool) *lineTable {
	t := &lineTable{}
	fileIndex := make(map[string]uint32)
	r := d.Reader()
	var seq []lineRow
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
		r.SkipChildren()
		if err != nil || lr == nil {
			continue
		}
		compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
		cuFiles := make(map[*dwarf.LineFile]uint32)
		seq = seq[:0]
		var le dwarf.LineEntry
		for {
			if err := lr.Next(&le); err != nil {
				if err != io.EOF {
					seq = seq[:0] // a broken program: keep the sequences before it
				}
				break
			}
			if le.EndSequence {
				if len(seq) > 0 && inCode(seq[0].addr) {
					t.rows = append(t.rows, seq...)
					t.rows = append(t.rows, lineRow{addr: le.Address, file: endSequence})
				}
				seq = seq[:0]
				if len(t.rows) > maxLineRows {
					return nil
				}
				continue
			}
			fi, ok := cuFiles[le.File]
			if !ok {
				name := ""
				if le.File != nil {
					name = sourcePath(compDir, le.File.Name)
				}
				if fi, ok = fileIndex[name]; !ok {
					fi = uint32(len(t.files))
					t.files = append(t.files, name)
					fileIndex[name] = fi
				}
				cuFiles[le.File] = fi
			}
			seq = append(seq, lineRow{addr: le.Address, file: fi, line: uint32(max(le.Line, 0))})
		}
	}
	if len(t.rows) == 0 {
		return nil
	}
	// Rows at one address: the end of a sequence first, so a sequence that
	// starts where another ends wins; then the order of the line program.
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
	// The last row at an address is the one a lookup finds; drop the rest.
	out := t.rows[:0]
	for i, row := range t.rows {
		if i+1 < len(t.rows) && t.rows[i+1].addr == row.addr {
			continue
		}
		out = append(out, row)
	}
	t.rows = slices.Clip(out)
	return t
}

// sourcePath resolves a line table's file name against the compilation
// directory as LLVM does. debug/dwarf already joins names in DWARF 4 and
// names in directory 0 of DWARF 5, but leaves the other relative
// directories of DWARF 5 (../include) relative to nothing.
func sourcePath(compDir, name string) string {
	if path.IsAbs(name) || compDir == "" {
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
