package jit

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// maxLine is the longest perf map line kept; a longer one is skipped up to
// its newline. Names are cut at MaxName, so this leaves room for both
// numbers and a long name.
const maxLine = MaxName + 64

// PerfMap parses a perf map (/tmp/perf-PID.map) as it grows: each line is
// `START SIZE NAME`, START and SIZE in hex with or without 0x, NAME the
// rest of the line. Feed it the bytes as they are appended; a line without
// its newline yet waits for the next Feed.
type PerfMap struct {
	partial []byte
	// skipping is set while the rest of an overlong line is dropped.
	skipping bool
	// Malformed counts lines skipped because they could not be parsed.
	Malformed int
	// line is the number of the next complete line, for errors.
	line int
	// Err is the first malformed line's error, for a message.
	Err error
}

// Feed parses the complete lines of b (after what earlier calls left
// over) and calls add with each symbol.
func (p *PerfMap) Feed(b []byte, add func(Symbol)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !p.skipping {
				p.partial = append(p.partial, b...)
				if len(p.partial) > maxLine {
					p.partial, p.skipping = p.partial[:0], true
				}
			}
			return
		}
		line := b[:i]
		b = b[i+1:]
		p.line++
		if p.skipping {
			p.skipping = false
			p.malformed(fmt.Errorf("line %d: longer than %d bytes", p.line, maxLine))
			continue
		}
		if len(p.partial) > 0 {
			p.partial = append(p.partial, line...)
			line = p.partial
		}
		if len(line) > maxLine {
			p.malformed(fmt.Errorf("line %d: longer than %d bytes", p.line, maxLine))
		} else if s, err := ParsePerfMapLine(line); err != nil {
			p.malformed(fmt.Errorf("line %d: %w", p.line, err))
		} else {
			add(s)
		}
		p.partial = p.partial[:0]
	}
}

func (p *PerfMap) malformed(err error) {
	p.Malformed++
	if p.Err == nil {
		p.Err = err
	}
}

// ParsePerfMapLine parses one perf map line, without its newline.
func ParsePerfMapLine(line []byte) (Symbol, error) {
	s := strings.TrimRight(string(line), "\r")
	startField, rest, ok := strings.Cut(s, " ")
	if !ok {
		return Symbol{}, fmt.Errorf("start: no size follows %q", clip(s))
	}
	sizeField, name, ok := strings.Cut(rest, " ")
	if !ok {
		return Symbol{}, fmt.Errorf("size: no name follows %q", clip(rest))
	}
	start, err := parseHex(startField)
	if err != nil {
		return Symbol{}, fmt.Errorf("start %q: %w", clip(startField), err)
	}
	size, err := parseHex(sizeField)
	if err != nil {
		return Symbol{}, fmt.Errorf("size %q: %w", clip(sizeField), err)
	}
	if size == 0 {
		return Symbol{}, fmt.Errorf("size 0 at %#x", start)
	}
	if start+size < start {
		return Symbol{}, fmt.Errorf("size %#x at %#x runs past the address space", size, start)
	}
	if name == "" {
		return Symbol{}, fmt.Errorf("name: empty at %#x", start)
	}
	return Symbol{Start: start, Size: size, Name: strings.ToValidUTF8(name, "\uFFFD")}, nil
}

func parseHex(f string) (uint64, error) {
	f = strings.TrimPrefix(strings.TrimPrefix(f, "0x"), "0X")
	v, err := strconv.ParseUint(f, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("not a hex number")
	}
	return v, nil
}

// clip shortens a field quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
