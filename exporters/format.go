package exporters

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sprof/sprof/stacks"
)

// Format names an output encoding, as the --format flag spells it.
type Format string

const (
	// Pprof is a gzip-compressed pprof protocol buffer.
	Pprof Format = "pprof"
	// Folded is one line per distinct stack: root;…;leaf count.
	Folded Format = "folded"
	// SVG is an interactive flame graph.
	SVG Format = "svg"
	// Speedscope is speedscope's JSON file format.
	Speedscope Format = "speedscope"
	// OTLP is OpenTelemetry's profiles signal, a ProfilesData protobuf.
	OTLP Format = "otlp"
	// OTLPJSON is OTLP in the protobuf JSON mapping.
	OTLPJSON Format = "otlp-json"
)

// formatSpec ties a Format to the file-name endings that select it and to
// its encoder.
type formatSpec struct {
	format     Format
	extensions []string
	write      func(io.Writer, *stacks.Profile, Options) error
}

// specs lists the formats in the order Formats returns them; the first
// extension of each is the canonical one.
func specs() []formatSpec {
	return []formatSpec{
		{Pprof, []string{".pb.gz", ".pprof", ".pb"}, WritePprof},
		{Folded, []string{".folded", ".txt"}, WriteFolded},
		{SVG, []string{".svg"}, WriteFlameGraph},
		{Speedscope, []string{".speedscope.json", ".speedscope"}, WriteSpeedscope},
		{OTLP, []string{".otlp.pb", ".otlp"}, WriteOTLP},
		{OTLPJSON, []string{".otlp.json"}, WriteOTLPJSON},
	}
}

// Formats returns the formats Write supports.
func Formats() []Format {
	var fs []Format
	for _, s := range specs() {
		fs = append(fs, s.format)
	}
	return fs
}

// ParseFormat returns the Format named s (as given to --format).
func ParseFormat(s string) (Format, error) {
	for _, spec := range specs() {
		if string(spec.format) == strings.ToLower(s) {
			return spec.format, nil
		}
	}
	return "", fmt.Errorf("unknown format %q; formats are: %s", s, formatList())
}

// FormatFromPath picks the format from the ending of an output file name,
// so `-o cpu.pb.gz` needs no --format. The longest ending that fits wins:
// x.otlp.pb is OTLP, not pprof.
func FormatFromPath(path string) (Format, error) {
	name := strings.ToLower(filepath.Base(path))
	var best Format
	longest := 0
	for _, spec := range specs() {
		for _, ext := range spec.extensions {
			if strings.HasSuffix(name, ext) && len(ext) > longest {
				best, longest = spec.format, len(ext)
			}
		}
	}
	if best != "" {
		return best, nil
	}
	return "", fmt.Errorf("cannot tell the format of %q from its name; use one of the endings %s or --format (%s)",
		path, Extensions(), formatList())
}

// Write encodes p in format f.
func Write(w io.Writer, p *stacks.Profile, f Format, opt Options) error {
	for _, spec := range specs() {
		if spec.format == f {
			return spec.write(w, p, opt)
		}
	}
	return fmt.Errorf("unknown format %q; formats are: %s", f, formatList())
}

func formatList() string {
	var names []string
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return strings.Join(names, ", ")
}

// Extensions lists the file-name endings FormatFromPath knows, for
// messages: ".pb.gz, .pprof, …".
func Extensions() string {
	var exts []string
	for _, spec := range specs() {
		exts = append(exts, spec.extensions...)
	}
	return strings.Join(exts, ", ")
}
