// Package cpus lists the CPUs that are online. The sampler and the side
// band both open one perf event per online CPU, and both read the same
// kernel file, whose format is that of Documentation/admin-guide/cputopology.rst.
package cpus

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

const onlinePath = "/sys/devices/system/cpu/online"

// Max bounds what a CPU list may name, far above any real machine, so a
// corrupt list cannot make us allocate without limit.
const Max = 1 << 16

// Online lists the CPUs that are online now. CPUs brought online later are
// not in it.
func Online() ([]int, error) {
	b, err := os.ReadFile(onlinePath)
	if err != nil {
		return nil, fmt.Errorf("list online CPUs: %w", err)
	}
	list, err := ParseList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", onlinePath, err)
	}
	return list, nil
}

// ParseList parses the kernel's CPU list format, e.g. "0-3,6,8-9", which
// names CPUs in increasing order.
func ParseList(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty CPU list")
	}
	var list []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first >= Max {
			return nil, fmt.Errorf("bad CPU number %q in %q", lo, s)
		}
		last := first
		if isRange {
			last, err = strconv.Atoi(hi)
			if err != nil || last < first || last >= Max {
				return nil, fmt.Errorf("bad CPU range %q in %q", part, s)
			}
		}
		if len(list) > 0 && first <= list[len(list)-1] {
			return nil, fmt.Errorf("CPU list %q is not increasing at %q", s, part)
		}
		for c := first; c <= last; c++ {
			list = append(list, c)
		}
	}
	return list, nil
}
