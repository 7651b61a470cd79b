package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sprof/sprof/internal/hexnum"
	"github.com/sprof/sprof/internal/readall"
	"github.com/sprof/sprof/stacks"
)

// ErrKernelAddressesHidden means /proc/kallsyms showed every address as
// zero: kernel.kptr_restrict hides them from this process (it needs root,
// or CAP_SYSLOG with kptr_restrict=1, and no kptr_restrict=2). Kernel frames
// can then only be shown as `[kernel] 0x...`.
var ErrKernelAddressesHidden = errors.New("kernel symbol addresses are hidden by kernel.kptr_restrict (run as root, or set sysctl kernel.kptr_restrict=0)")

// maxKallsymsLines bounds a kallsyms file; a kernel with every module
// loaded has a few hundred thousand symbols.
const maxKallsymsLines = 8 << 20

// maxKallsymsBytes bounds the bytes of a kallsyms file read into memory:
// a line of a real kernel's takes 30 to 100.
const maxKallsymsBytes = 512 << 20

// Kernel symbolizes kernel addresses from a snapshot of /proc/kallsyms,
// the core kernel and loaded modules (and BPF programs, which kallsyms
// lists as the module "bpf") alike. A function in a module has the
// module's name in brackets as its Frame.File, `[ext4]`, as perf shows it,
// so function names stay exactly the kernel's. Lookups are binary searches
// over a sorted table; a Kernel is immutable and safe for concurrent use.
// Modules loaded after the snapshot are not known: take a new one with
// LoadKernel when needed.
type Kernel struct {
	syms *symtab
}

// LoadKernel reads /proc/kallsyms, and /proc/modules for where each
// module ends. It returns an error wrapping ErrKernelAddressesHidden when
// the kernel hides its addresses.
func LoadKernel() (*Kernel, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var modules io.Reader
	if m, err := os.Open("/proc/modules"); err == nil {
		defer m.Close()
		modules = m
	}
	k, err := ReadKallsyms(f, modules)
	if err != nil {
		return nil, fmt.Errorf("/proc/kallsyms: %w", err)
	}
	return k, nil
}

// ReadKallsyms parses the kallsyms format: "ADDRESS TYPE NAME[\t[MODULE]]"
// per line. Only text symbols (types t, T, w, W) name code; the others
// end the function before them. modules, if not nil, is in the format of
// /proc/modules ("NAME SIZE REFS DEPS STATE ADDRESS ..."): kallsyms has no
// sizes, and without the end of each module its last function would run
// on to the next module's first.
func ReadKallsyms(r io.Reader, modules io.Reader) (*Kernel, error) {
	var syms []symbol
	if modules != nil {
		ends, err := moduleEnds(modules)
		if err != nil {
			return nil, fmt.Errorf("modules: %w", err)
		}
		syms = ends
	}
	// The whole file is read first, to size the symbols at once: grown
	// by append, 120,000 of them allocated 47 MB on the way. Each name is
	// then copied out of its line into one string, and each module's name
	// is kept once. Lines are split by hand, without an allocation each:
	// in the kernel matrix's emulated VMs parsing took 2-8 s of each start
	// with strings.Fields, 120,000 lines at 1.3 µs each on a host.
	data, err := readall.Append(make([]byte, 0, 1<<20), r, maxKallsymsBytes)
	if err != nil {
		return nil, err
	}
	n := bytes.Count(data, []byte{'\n'}) + 1
	if n > maxKallsymsLines+1 {
		return nil, fmt.Errorf("more than %d lines", maxKallsymsLines)
	}
	syms = slices.Grow(syms, n)
	ends := make([]int, 0, n) // of each line's name in names
	var names strings.Builder
	names.Grow(len(data)) // more than the names: copied to size below
	moduleNames := map[string]string{}
	nonzero := false
	first := len(syms)
	for line := 1; len(data) > 0; line++ {
		l, rest, _ := bytes.Cut(data, []byte{'\n'})
		data = rest
		s, name, err := parseKallsymsLine(bytes.TrimSuffix(l, []byte{'\r'}), moduleNames)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		nonzero = nonzero || s.addr != 0
		names.Write(name)
		ends = append(ends, names.Len())
		syms = append(syms, s)
	}
	if len(ends) == 0 {
		return nil, errors.New("no symbols")
	}
	if !nonzero {
		return nil, ErrKernelAddressesHidden
	}
	all, start := names.String(), 0
	if names.Cap()-len(all) > len(all)/8 {
		all = strings.Clone(all) // the Builder's growth, not kept
	}
	for i, end := range ends {
		syms[first+i].name = all[start:end]
		if regionEnd(syms[first+i].name) {
			syms[first+i].boundary = true
		}
		start = end
	}
	return &Kernel{syms: newSymtab(syms, DemangleFull)}, nil
}

// regionEnd reports text symbols that mark where a code region ends, not
// functions: an address past the kernel's last function must not be
// attributed to it.
func regionEnd(name string) bool {
	switch name {
	case "_etext", "_einittext", "__irqentry_text_end", "__softirqentry_text_end":
		return true
	}
	return false
}

// moduleEnds returns a boundary at the end of each module's memory.
func moduleEnds(r io.Reader) ([]symbol, error) {
	var ends []symbol
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		if line > maxKallsymsLines {
			return nil, fmt.Errorf("more than %d lines", maxKallsymsLines)
		}
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			return nil, fmt.Errorf("line %d: %q is not NAME SIZE REFS DEPS STATE ADDRESS", line, sc.Text())
		}
		size, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: size %q: %w", line, f[1], err)
		}
		base, err := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: address %q: %w", line, f[5], err)
		}
		if base != 0 && base+size > base {
			ends = append(ends, symbol{addr: base + size, limit: math.MaxUint64, boundary: true})
		}
	}
	return ends, sc.Err()
}

// parseKallsymsLine parses one line of kallsyms into a symbol without its
// name, which it returns as the line's bytes. A module's name comes from
// modules, where each one is kept once.
func parseKallsymsLine(line []byte, modules map[string]string) (symbol, []byte, error) {
	var fields [4][]byte
	nf := 0
	for i := 0; i < len(line); {
		if isSpace(line[i]) {
			i++
			continue
		}
		if nf == len(fields) {
			return symbol{}, nil, fmt.Errorf("%q is not ADDRESS TYPE NAME [MODULE]", line)
		}
		start := i
		for i < len(line) && !isSpace(line[i]) {
			i++
		}
		fields[nf] = line[start:i]
		nf++
	}
	if nf < 3 || len(fields[1]) != 1 {
		return symbol{}, nil, fmt.Errorf("%q is not ADDRESS TYPE NAME [MODULE]", line)
	}
	addr, ok := hexnum.Parse(fields[0])
	if !ok {
		return symbol{}, nil, fmt.Errorf("address %q: not a 64-bit hexadecimal number", fields[0])
	}
	s := symbol{addr: addr, limit: math.MaxUint64, rank: rankFunc}
	if nf == 4 {
		m := fields[3]
		if len(m) < 3 || m[0] != '[' || m[len(m)-1] != ']' {
			return symbol{}, nil, fmt.Errorf("module %q is not in brackets", m)
		}
		m = m[1 : len(m)-1]
		name, ok := modules[string(m)] // no allocation to look up
		if !ok {
			name = string(m)
			modules[name] = name
		}
		s.module = name
	}
	switch fields[1][0] {
	case 'T', 'W':
		s.rank += rankGlobal
	case 't', 'w':
	default:
		s.boundary = true
	}
	return s, fields[2], nil
}

// isSpace says whether c separates the fields of a kallsyms line: ASCII
// white space.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' }

// Symbolize appends the frame of the kernel function containing addr to
// dst. It appends nothing when no function covers addr, and for a nil
// Kernel, so a caller without kernel symbols shows `[kernel] 0x...`.
func (k *Kernel) Symbolize(dst []stacks.Frame, addr uint64) []stacks.Frame {
	if k == nil {
		return dst
	}
	i := k.syms.lookup(addr)
	if i < 0 {
		return dst
	}
	return append(dst, k.syms.frame(i))
}
