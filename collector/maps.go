package collector

import (
	"bytes"
	"fmt"
	"slices"
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
	id     uint32
	maps   []mapping
	frozen bool
}

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

// insert adds m, trimming or removing the parts of older mappings it
// covers: a new mmap over an old range replaces it, as in the kernel.
func (s *mapSet) insert(m mapping) {
	if m.limit <= m.start {
		return
	}
	out := s.maps[:0:0]
	for _, o := range s.maps {
		if o.limit <= m.start || o.start >= m.limit {
			out = append(out, o)
			continue
		}
		if o.start < m.start {
			left := o
			left.limit = m.start
			out = append(out, left)
		}
		if o.limit > m.limit {
			right := o
			right.offset += m.limit - o.start
			right.start = m.limit
			out = append(out, right)
		}
	}
	out = append(out, m)
	slices.SortFunc(out, func(a, b mapping) int {
		if a.start < b.start {
			return -1
		}
		if a.start > b.start {
			return 1
		}
		return 0
	})
	s.maps = out
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

// parseMaps returns the executable, file-backed entries of a
// /proc/PID/maps file. A malformed line is an error naming its number.
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
// reports whether the entry is executable and names something that can be
// symbolized (a file or [vdso], not anonymous memory).
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
	return e, perms[2] == 'x' && symbolizable(e.path), nil
}

// symbolizable reports whether a mapping's name stands for code sprof can
// look up: a file or the vDSO, not anonymous memory.
func symbolizable(name string) bool {
	return name != "" && name != "//anon" && (name[0] != '[' || name == vdsoName)
}
