package exporters

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/sprof/sprof/exporters/flamegraph"
	"github.com/sprof/sprof/stacks"
)

// WriteFolded writes p as folded stacks: one line per distinct stack,
// frames from root to leaf joined by `;`, a space and the sample count, or
// with opt.OffCPU the microseconds off the CPU.
// Kernel frames end in `_[k]`, inlined frames in `_[i]`, JIT-compiled
// ones in `_[j]`, the suffixes flamegraph.pl colours by, and Python
// functions in `_[py]`. Lines are sorted so equal profiles give equal
// files; samples with a count below one are left out.
func WriteFolded(w io.Writer, p *stacks.Profile, opt Options) error {
	counts := map[string]int64{}
	var frames []frame
	var line []byte
	for _, ws := range aggregate(p.Samples, &opt) {
		frames = rootFirst(frames[:0], ws.sample, &opt)
		line = line[:0]
		for i, f := range frames {
			if i > 0 {
				line = append(line, ';')
			}
			line = appendFoldedName(line, f)
		}
		counts[string(line)] += ws.count
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	bw := bufio.NewWriter(w)
	for _, k := range keys {
		n := counts[k]
		if opt.OffCPU {
			n /= 1000
		}
		line = append(append(append(line[:0], k...), ' '), strconv.FormatInt(n, 10)...)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("write folded stacks: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write folded stacks: %w", err)
	}
	return nil
}

// appendFoldedName appends f's name, cleaned as for pprof and with `;`
// turned into `:` so it cannot split the frame, and the suffix of its kind.
func appendFoldedName(dst []byte, f frame) []byte {
	name := cleanName(f.name)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == ';' {
			c = ':'
		}
		dst = append(dst, c)
	}
	switch f.kind {
	case flamegraph.Kernel:
		dst = append(dst, "_[k]"...)
	case flamegraph.Inlined:
		dst = append(dst, "_[i]"...)
	case flamegraph.JIT:
		dst = append(dst, "_[j]"...)
	case flamegraph.Python:
		dst = append(dst, "_[py]"...)
	}
	return dst
}
