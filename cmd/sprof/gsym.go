package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/sprof/sprof/internal/hexnum"
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
		return lookupFromStdin(e.stdin, w, lookupChunkLines)
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
	return appendResult(b, res, a, r.LookupInto(res, a))
}

// appendResult appends a lookup's result, or its error, as llvm-gsymutil
// prints it.
func appendResult(b []byte, res *gsym.LookupResult, a uint64, err error) []byte {
	if err != nil {
		return gsym.AppendLookupError(b, a, err)
	}
	return res.AppendText(b)
}

// lookupChunkLines is how many input lines are looked up together: the
// addresses of each file in one batch (gsym.Reader.LookupBatch, which
// sorts them and reads the file in order), the answers kept to be
// printed in input order. In a whole run most of the time goes to
// reading, formatting and writing, and larger chunks cost more in the
// page faults of their buffers than their batches save: 100,000 lines
// in the go command took 0.10-0.11 s of CPU in chunks of 1,024 to 8,192
// lines, 0.15 s in one chunk.
const lookupChunkLines = 1 << 12

// lookupFromStdin answers lines "ADDR FILE.gsym", keeping each file open.
// Lines are split in place and their answers appended to one buffer: a
// run is mostly lookups (BenchmarkGsymLookupStdin). Up to chunk lines
// are looked up together.
func lookupFromStdin(in io.Reader, w *bufio.Writer, chunk int) error {
	readers := map[string]*gsym.Reader{}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var c lookupChunk
	for {
		more, err := c.read(sc, readers, chunk)
		c.answer(w)
		if err != nil || !more {
			return err
		}
	}
}

// lookupChunk is a chunk of input lines, grouped by file.
type lookupChunk struct {
	files []*fileLookups
	lines int
	// answers[i] is line i's output, kept in blocks until all the
	// chunk's batches (which answer in address order) are done; blocks
	// are reused from chunk to chunk, where one growing buffer would be
	// copied at every growth.
	answers [][]byte
	blocks  [][]byte
	block   int // the block being filled
	tmp     []byte
}

// answerBlock is the size of a block of answers.
const answerBlock = 1 << 20

// keep copies b into the blocks and returns the copy.
func (c *lookupChunk) keep(b []byte) []byte {
	for ; ; c.block++ {
		if c.block == len(c.blocks) {
			c.blocks = append(c.blocks, make([]byte, 0, max(answerBlock, len(b))))
		}
		blk := c.blocks[c.block]
		if n := len(blk); cap(blk)-n >= len(b) {
			blk = append(blk, b...)
			c.blocks[c.block] = blk
			return blk[n:len(blk):len(blk)]
		}
	}
}

// fileLookups are a chunk's addresses in one file and their lines.
type fileLookups struct {
	r     *gsym.Reader
	addrs []uint64
	lines []int
}

// read reads up to max lines; more reports that input remains. An error
// ends the input after the lines read before it.
func (c *lookupChunk) read(sc *bufio.Scanner, readers map[string]*gsym.Reader, max int) (more bool, err error) {
	c.lines = 0
	for _, f := range c.files {
		f.addrs, f.lines = f.addrs[:0], f.lines[:0]
	}
	byReader := map[*gsym.Reader]*fileLookups{}
	for c.lines < max {
		if !sc.Scan() {
			return false, sc.Err()
		}
		addrField, rest := nextField(sc.Bytes())
		path, _ := nextField(rest)
		if len(path) == 0 {
			continue
		}
		a, ok := parseAddress(addrField)
		if !ok {
			return false, fmt.Errorf("invalid address %q", addrField)
		}
		r, ok := readers[string(path)]
		if !ok {
			var err error
			if r, err = gsym.Open(string(path)); err != nil {
				return false, err
			}
			readers[string(path)] = r
		}
		f := byReader[r]
		if f == nil {
			if len(byReader) < len(c.files) {
				f = c.files[len(byReader)]
			} else {
				f = &fileLookups{}
				c.files = append(c.files, f)
			}
			f.r = r
			byReader[r] = f
		}
		f.addrs = append(f.addrs, a)
		f.lines = append(f.lines, c.lines)
		c.lines++
	}
	return true, nil
}

// answer looks the chunk's addresses up and writes the answers in input
// order, each followed by a blank line as llvm-gsymutil prints them.
func (c *lookupChunk) answer(w *bufio.Writer) {
	for i := range c.blocks {
		c.blocks[i] = c.blocks[i][:0]
	}
	c.block = 0
	c.answers = slices.Grow(c.answers[:0], c.lines)[:c.lines]
	for _, f := range c.files {
		if len(f.addrs) == 0 {
			continue
		}
		f.r.LookupBatch(f.addrs, func(i int, res *gsym.LookupResult, err error) {
			c.tmp = append(appendResult(c.tmp[:0], res, f.addrs[i], err), '\n')
			c.answers[f.lines[i]] = c.keep(c.tmp)
		})
	}
	for _, b := range c.answers {
		w.Write(b)
	}
}

// parseAddress parses an address as strconv.ParseUint with base 0 does,
// the usual "0x" hex form without allocating.
func parseAddress(b []byte) (uint64, bool) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		if v, ok := hexnum.Parse(b[2:]); ok {
			return v, true
		}
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
