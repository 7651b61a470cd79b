package unwind

import (
	"debug/elf"
	"io"

	"github.com/sprof/sprof/internal/elfx"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/synth"
)

// MaxBuildInput bounds the CFI (.eh_frame, .debug_frame and .sframe, by
// their section headers) a table is built from: more than twice
// libLLVM's. It bounds a build's transient memory: about 16 times the CFI
// at the peak (libLLVM 22: 6.2 MiB of .eh_frame, 100 MiB of heap at the
// peak for a table of 14.6 MiB), so at most about 256 MiB.
const MaxBuildInput = 16 << 20

// BuildTable is the BuildFunc of a profiler: the table of the ELF file r
// is its .sframe section if hasSFrame, with the functions it lacks filled
// from .eh_frame (synth.FillGaps), else rules synthesized from .eh_frame
// and .debug_frame. It returns the table, the method its rules count as,
// an error of the .sframe section that was worked around, and an error if
// there is no table.
func BuildTable(r io.ReaderAt, name string, hasSFrame bool) (t *sframe.Table, kind Method, sframeErr, err error) {
	err = elfx.Read(r, name, func(f *elf.File) error {
		var sf *sframe.Table
		if hasSFrame {
			sf, sframeErr = sframe.FromELF(f)
		}
		eh, _, err := synth.FromELF(f)
		switch {
		case sf != nil && err == nil:
			t, kind = synth.FillGaps(sf, eh), MethodSFrame
		case sf != nil:
			t, kind = sf, MethodSFrame
		case err != nil:
			return err
		default:
			t, kind = eh, MethodEHFrame
		}
		return nil
	})
	return t, kind, sframeErr, err
}
