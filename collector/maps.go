package collector

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// mapping is one executable mapping of a process: runtime addresses
// [start, limit) hold the bytes of bin from file offset offset on.
type mapping struct {
	start, limit, offset uint64
	bin                  *binaryFile
}

// mapSet is the executable mappings of one process at one moment, sorted
// by start and not overlapping. Aggregated stacks point at the mapSet their
// sample was taken under, so a set that a stack refers to is frozen: a later
// mmap or exec copies it rather than changing what old samples resolve to.
type mapSet struct {
	id   uint32
	maps []mapping
	// anon is the executable mappings of no file (JIT code, [vsyscall]),
	// sorted and not overlapping maps or each other: they name no frame,
	// but a return address there is one (executable).
	anon   []codeRange
	frozen bool
}

// codeRange is an executable address range [start, limit) of no file.
type codeRange struct{ start, limit uint64 }

// find returns the mapping holding addr, or nil.
func (s *mapSet) find(addr uint64) *mapping {
	i, _ := slices.BinarySearchFunc(s.maps, addr, func(m mapping, a uint64) int {
		if m.limit <= a {
			return -1
		}
		if m.start > a {
			return 1
		}
		return 0
	})
	if i < len(s.maps) && s.maps[i].start <= addr && addr < s.maps[i].limit {
		return &s.maps[i]
	}
	return nil
}

// has reports whether s still maps d as it was: the same binary from the
// same start, or, for d of no binary, code of no file over all of d's
// range (merged with its neighbours into one mapping, as /proc shows it,
// it is still the same code).
func (s *mapSet) has(d mapping) bool {
	if d.bin == nil {
		i := sort.Search(len(s.anon), func(i int) bool { return s.anon[i].limit > d.start })
		return i < len(s.anon) && s.anon[i].start <= d.start && d.limit <= s.anon[i].limit
	}
	m := s.find(d.start)
	return m != nil && m.start == d.start && m.bin == d.bin
}

// executable reports whether addr lies in an executable mapping, of a
// file or not.
func (s *mapSet) executable(addr uint64) bool {
	if s.find(addr) != nil {
		return true
	}
	i := sort.Search(len(s.anon), func(i int) bool { return s.anon[i].limit > addr })
	return i < len(s.anon) && s.anon[i].start <= addr
}

// insert adds m, trimming or removing the parts of older mappings it
// covers: a new mmap over an old range replaces it, as in the kernel.
func (s *mapSet) insert(m mapping) {
	if m.limit <= m.start {
		return
	}
	s.anon = without(s.anon, m.start, m.limit)
	s.maps = append(without(s.maps, m.start, m.limit), m)
	slices.SortFunc(s.maps, func(a, b mapping) int { return cmp.Compare(a.start, b.start) })
}

// insertAnon adds an executable mapping of no file, as insert does.
func (s *mapSet) insertAnon(r codeRange) {
	if r.limit <= r.start {
		return
	}
	s.maps = without(s.maps, r.start, r.limit)
	s.anon = append(without(s.anon, r.start, r.limit), r)
	slices.SortFunc(s.anon, func(a, b codeRange) int { return cmp.Compare(a.start, b.start) })
}

// ranged is a mapping or a codeRange: a range that can be cut to a part of it.
type ranged[T any] interface {
	bounds() (start, limit uint64)
	part(start, limit uint64) T
}

func (m mapping) bounds() (uint64, uint64) { return m.start, m.limit }

// part keeps the file offset of what stays mapped.
func (m mapping) part(start, limit uint64) mapping {
	m.offset += start - m.start
	m.start, m.limit = start, limit
	return m
}

func (r codeRange) bounds() (uint64, uint64)           { return r.start, r.limit }
func (r codeRange) part(start, limit uint64) codeRange { return codeRange{start, limit} }

// without returns a new list of what of list lies outside [start, limit).
func without[T ranged[T]](list []T, start, limit uint64) []T {
	out := list[:0:0]
	for _, o := range list {
		lo, hi := o.bounds()
		if hi <= start || lo >= limit {
			out = append(out, o)
			continue
		}
		if lo < start {
			out = append(out, o.part(lo, start))
		}
		if hi > limit {
			out = append(out, o.part(limit, hi))
		}
	}
	return out
}

// mapsEntry is one executable line of /proc/PID/maps.
type mapsEntry struct {
	start, limit, offset uint64
	dev                  string
	inode                uint64
	// path is the file as the process sees it, without " (deleted)".
	path    string
	deleted bool
}

// maxMapsLines bounds the lines parseMaps reads: far above the kernel's
// default vm.max_map_count of 65530.
const maxMapsLines = 1 << 20

// parseMaps returns the executable entries of a /proc/PID/maps file, of
// files and not (entry.symbolizable tells). A malformed line is an error naming its number.
func parseMaps(b []byte) ([]mapsEntry, error) {
	var out []mapsEntry
	for n := 1; len(b) > 0; n++ {
		if n > maxMapsLines {
			return nil, fmt.Errorf("maps: more than %d lines", maxMapsLines)
		}
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 {
			continue
		}
		e, exec, err := parseMapsLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		if exec {
			out = append(out, e)
		}
	}
	return out, nil
}

// parseMapsLine parses "start-limit perms offset dev inode   path" and
// reports whether the entry is executable.
func parseMapsLine(line string) (e mapsEntry, exec bool, err error) {
	field := func(name string) (string, error) {
		line = strings.TrimLeft(line, " ")
		f, rest, _ := strings.Cut(line, " ")
		if f == "" {
			return "", fmt.Errorf("missing %s", name)
		}
		line = rest
		return f, nil
	}
	var addrs, perms, off, inode string
	if addrs, err = field("address range"); err != nil {
		return e, false, err
	}
	if perms, err = field("permissions"); err != nil {
		return e, false, err
	}
	if off, err = field("offset"); err != nil {
		return e, false, err
	}
	if e.dev, err = field("device"); err != nil {
		return e, false, err
	}
	if inode, err = field("inode"); err != nil {
		return e, false, err
	}
	lo, hi, ok := strings.Cut(addrs, "-")
	if e.start, err = strconv.ParseUint(lo, 16, 64); err != nil || !ok {
		return e, false, fmt.Errorf("bad address range %q", addrs)
	}
	if e.limit, err = strconv.ParseUint(hi, 16, 64); err != nil || e.limit <= e.start {
		return e, false, fmt.Errorf("bad address range %q", addrs)
	}
	if e.offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return e, false, fmt.Errorf("bad offset %q", off)
	}
	if e.inode, err = strconv.ParseUint(inode, 10, 64); err != nil {
		return e, false, fmt.Errorf("bad inode %q", inode)
	}
	if len(perms) != 4 {
		return e, false, fmt.Errorf("bad permissions %q", perms)
	}
	e.path = strings.TrimLeft(line, " ")
	e.path, e.deleted = strings.CutSuffix(e.path, " (deleted)")
	return e, perms[2] == 'x', nil
}

// symbolizable reports whether the entry maps a file or the vDSO.
func (e *mapsEntry) symbolizable() bool { return symbolizable(e.path) }

// symbolizable reports whether a mapping's name stands for code sprof can
// look up: a file or the vDSO, not anonymous memory.
func symbolizable(name string) bool {
	return name != "" && name != "//anon" && (name[0] != '[' || name == vdsoName)
}
