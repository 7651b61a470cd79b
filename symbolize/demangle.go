package symbolize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

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
	out := demangle.Filter(name, opts...)
	if out != name && strings.HasPrefix(name, "_ZN") && strings.Contains(out, "$u") {
		out = rustLegacyChars(out)
	}
	return out
}

// rustLegacyChars decodes the characters a legacy Rust name spells as
// "$u" hex "$" ("gr$uf6$$udf$e" for größe) and the demangler leaves
// encoded when they are not ASCII, as rustc-demangle and perf decode them.
// A malformed escape stays as it is.
func rustLegacyChars(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "$u")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+2:], '$')
		r, err := strconv.ParseUint(s[i+2:i+2+max(j, 0)], 16, 32)
		if j < 1 || j > 6 || err != nil || !utf8.ValidRune(rune(r)) {
			b.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteRune(rune(r))
		s = s[i+2+j+1:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}
