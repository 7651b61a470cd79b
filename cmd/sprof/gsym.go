package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/sprof/sprof/symbolize/gsym"
	"github.com/sprof/sprof/symbolize/gsym/convert"
)

const gsymUsage = `Usage:
  sprof gsym convert BINARY [-o OUT] [--breakpad FILE.sym] [--output-version 1|2]
  sprof gsym lookup FILE.gsym ADDR...
  sprof gsym lookup --addresses-from-stdin
  sprof gsym dump FILE.gsym

Converts binaries to GSYM, LLVM's compact symbolization format, looks up
addresses and dumps GSYM files. Output matches llvm-gsymutil's, and files
are interchangeable with it.

convert reads the binary's DWARF (or its separate debug file, found by
build ID or .gnu_debuglink under /usr/lib/debug) and ELF symbol table, or a
Breakpad .sym file with --breakpad, and writes BINARY.gsym or OUT.

lookup prints the inline stack of each address (file virtual addresses,
hex with 0x). With --addresses-from-stdin it reads lines "ADDR FILE.gsym"
as llvm-gsymutil does and prints a blank line after each result.
`

func runGsym(e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand: convert, lookup or dump")
	}
	switch args[0] {
	case "convert":
		return runGsymConvert(e, args[1:])
	case "lookup":
		return runGsymLookup(e, args[1:])
	case "dump":
		return runGsymDump(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, gsymUsage)
		return nil
	}
	return usagef("unknown subcommand %q: use convert, lookup or dump", args[0])
}

func runGsymConvert(e *env, args []string) error {
	fs := newFlagSet(e, "gsym convert", gsymUsage)
	out := fs.StringP("out", "o", "", "output `file` (default BINARY.gsym)")
	breakpad := fs.String("breakpad", "", "convert this Breakpad .sym `file` instead of the binary's DWARF")
	version := fs.Int("output-version", 1, "GSYM format `version`: 1 (read by every llvm-gsymutil) or 2 (LLVM 23+)")
	debugDirs := fs.StringSlice("debug-dir", nil, "`dir`ectory of separate debug files (default /usr/lib/debug)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("convert takes one BINARY (or, with --breakpad, the binary or the .sym's name)")
	}
	if *version != 1 && *version != 2 {
		return usagef("--output-version must be 1 or 2, not %d", *version)
	}
	bin := fs.Arg(0)
	if *out == "" {
		*out = bin + ".gsym"
	}
	start := time.Now()
	var (
		c     *gsym.Creator
		order binary.ByteOrder
		err   error
	)
	if *breakpad != "" {
		var st convert.BreakpadStats
		c, st, err = convert.BreakpadFile(*breakpad)
		if err == nil {
			fmt.Fprintf(e.stderr, "Loaded %d functions and %d public symbols from %s.\n", st.Functions, st.Publics, *breakpad)
		}
	} else {
		bar := newProgressBar(e.stderr, "compilation units")
		var st convert.Stats
		c, st, err = convert.ELF(bin, convert.Options{DebugDirs: *debugDirs, Progress: func(done, total int) {
			bar.update(int64(done), int64(total))
		}})
		bar.done()
		if err == nil {
			order = st.ByteOrder
			if st.DebugFile != "" {
				fmt.Fprintf(e.stderr, "Using debug file %s.\n", st.DebugFile)
			}
			fmt.Fprintf(e.stderr, "Loaded %d functions from DWARF.\nLoaded %d functions from symbol table.\nPruned %d functions, ended with %d total\n",
				st.FromDWARF, st.FromSymtab, st.Pruned, st.Total)
		}
	}
	if err != nil {
		return err
	}
	if err := c.WriteFile(*out, gsym.EncodeOptions{Version: *version, ByteOrder: order}); err != nil {
		return err
	}
	if fi, err := os.Stat(*out); err == nil {
		fmt.Fprintf(e.stderr, "Wrote %s (%d bytes, version %d) in %v.\n", *out, fi.Size(), *version, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func runGsymLookup(e *env, args []string) error {
	fs := newFlagSet(e, "gsym lookup", gsymUsage)
	fromStdin := fs.Bool("addresses-from-stdin", false, "read lines \"ADDR FILE.gsym\" from stdin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	defer w.Flush()
	if *fromStdin {
		if fs.NArg() != 0 {
			return usagef("--addresses-from-stdin takes no arguments")
		}
		return lookupFromStdin(e.stdin, w)
	}
	if fs.NArg() < 2 {
		return usagef("lookup needs a GSYM file and at least one address")
	}
	addrs := make([]uint64, 0, fs.NArg()-1)
	for _, a := range fs.Args()[1:] {
		v, err := strconv.ParseUint(a, 0, 64)
		if err != nil {
			return usagef("invalid address %q", a)
		}
		addrs = append(addrs, v)
	}
	r, err := gsym.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Fprintf(w, "Looking up addresses in %q:\n", fs.Arg(0))
	var res gsym.LookupResult
	for _, a := range addrs {
		w.Write(appendLookup(w.AvailableBuffer(), r, &res, a))
	}
	return nil
}

// appendLookup appends the lookup of a as llvm-gsymutil prints it.
func appendLookup(b []byte, r *gsym.Reader, res *gsym.LookupResult, a uint64) []byte {
	if err := r.LookupInto(res, a); err != nil {
		return gsym.AppendLookupError(b, a, err)
	}
	return res.AppendText(b)
}

// lookupFromStdin answers lines "ADDR FILE.gsym", keeping each file open.
// Lines are split in place and answers appended to w's buffer: a lookup
// costs no allocation, and a run is mostly lookups (BenchmarkGsymLookupStdin).
func lookupFromStdin(in io.Reader, w *bufio.Writer) error {
	readers := map[string]*gsym.Reader{}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var res gsym.LookupResult
	for sc.Scan() {
		addrField, rest := nextField(sc.Bytes())
		path, _ := nextField(rest)
		if len(path) == 0 {
			continue
		}
		a, ok := parseAddress(addrField)
		if !ok {
			return fmt.Errorf("invalid address %q", addrField)
		}
		r, ok := readers[string(path)]
		if !ok {
			var err error
			if r, err = gsym.Open(string(path)); err != nil {
				return err
			}
			readers[string(path)] = r
		}
		buf := appendLookup(w.AvailableBuffer(), r, &res, a)
		w.Write(append(buf, '\n'))
	}
	return sc.Err()
}

// parseAddress parses an address as strconv.ParseUint with base 0 does,
// the usual "0x" hex form without allocating.
func parseAddress(b []byte) (uint64, bool) {
	if len(b) > 2 && len(b) <= 18 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		var v uint64
		for _, c := range b[2:] {
			switch {
			case '0' <= c && c <= '9':
				c -= '0'
			case 'a' <= c && c <= 'f':
				c -= 'a' - 10
			case 'A' <= c && c <= 'F':
				c -= 'A' - 10
			default:
				return parseUint(b)
			}
			v = v<<4 | uint64(c)
		}
		return v, true
	}
	return parseUint(b)
}

func parseUint(b []byte) (uint64, bool) {
	v, err := strconv.ParseUint(string(b), 0, 64)
	return v, err == nil
}

// nextField returns the first field of b, as separated by spaces, tabs
// or carriage returns, and the rest.
func nextField(b []byte) (field, rest []byte) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func runGsymDump(e *env, args []string) error {
	fs := newFlagSet(e, "gsym dump", gsymUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("dump takes one GSYM file")
	}
	r, err := gsym.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer r.Close()
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	defer w.Flush()
	return r.Dump(w)
}
