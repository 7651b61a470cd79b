package symbolize

import (
	"fmt"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Demangling says how C++ and Rust symbol names are shown.
type Demangling uint8

const (
	// DemangleFull shows names as `addr2line -C` and perf do:
	// `ns::Box<int>::push(int const&)`.
	DemangleFull Demangling = iota
	// DemangleNoParams drops function parameters, `ns::Box<int>::push`,
	// which keeps flame graph labels short and merges overloads.
	DemangleNoParams
	// DemangleNone keeps the names as the binary spells them.
	DemangleNone
)

func (d Demangling) String() string {
	switch d {
	case DemangleFull:
		return "full"
	case DemangleNoParams:
		return "noparams"
	case DemangleNone:
		return "none"
	}
	return fmt.Sprintf("Demangling(%d)", uint8(d))
}

// mangled reports whether name may be an Itanium C++ or Rust (legacy or
// v0) mangled name; the test is cheap so plain C names skip the demangler.
func mangled(name string) bool {
	return strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R")
}

// maxDemangled bounds the demangler's output (as a power of two), so a
// hostile name built to expand exponentially costs little.
const maxDemangled = 16

func demangled(name string, d Demangling) string {
	opts := []demangle.Option{demangle.MaxLength(maxDemangled)}
	if d == DemangleNoParams {
		opts = append(opts, demangle.NoParams)
	}
	return demangle.Filter(name, opts...)
}
