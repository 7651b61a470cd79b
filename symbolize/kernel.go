package symbolize

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

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

// LoadKernel reads /proc/kallsyms. It returns an error wrapping
// ErrKernelAddressesHidden when the kernel hides its addresses.
func LoadKernel() (*Kernel, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	k, err := ReadKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("/proc/kallsyms: %w", err)
	}
	return k, nil
}

// ReadKallsyms parses the kallsyms format: "ADDRESS TYPE NAME[\t[MODULE]]"
// per line. Only text symbols (types t, T, w, W) name code; the others
// end the function before them.
func ReadKallsyms(r io.Reader) (*Kernel, error) {
	var syms []symbol
	sc := bufio.NewScanner(r)
	nonzero := false
	for line := 1; sc.Scan(); line++ {
		if line > maxKallsymsLines {
			return nil, fmt.Errorf("more than %d lines", maxKallsymsLines)
		}
		s, err := parseKallsymsLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		nonzero = nonzero || s.addr != 0
		syms = append(syms, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(syms) == 0 {
		return nil, errors.New("no symbols")
	}
	if !nonzero {
		return nil, ErrKernelAddressesHidden
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

func parseKallsymsLine(line string) (symbol, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 || len(fields) > 4 || len(fields[1]) != 1 {
		return symbol{}, fmt.Errorf("%q is not ADDRESS TYPE NAME [MODULE]", line)
	}
	addr, err := strconv.ParseUint(fields[0], 16, 64)
	if err != nil {
		return symbol{}, fmt.Errorf("address %q: %w", fields[0], err)
	}
	s := symbol{addr: addr, limit: math.MaxUint64, name: fields[2], rank: rankFunc}
	if len(fields) == 4 {
		m := fields[3]
		if len(m) < 3 || m[0] != '[' || m[len(m)-1] != ']' {
			return symbol{}, fmt.Errorf("module %q is not in brackets", m)
		}
		s.module = m[1 : len(m)-1]
	}
	switch fields[1] {
	case "T", "W":
		s.rank += rankGlobal
	case "t", "w":
	default:
		s.boundary = true
	}
	if regionEnd(s.name) {
		s.boundary = true
	}
	return s, nil
}

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
