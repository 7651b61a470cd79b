package main

import (
	"debug/elf"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/synth"
)

const sframeUsage = `Usage:
  sprof sframe dump FILE [--json] [--addr ADDR]
  sprof sframe lookup FILE ADDR... [--addr ADDR]
  sprof sframe synth BINARY -o OUT [--version 1|2|3] [--addr ADDR]

Reads the SFrame unwind table (.sframe, SFrame versions 1 to 3) of a linked
ELF executable or shared object, as GNU binutils 2.40 and later write it
with 'as --gsframe'. FILE may also be a raw SFrame section, as synth or
'objcopy --dump-section .sframe=OUT' writes it, recognized by its magic;
--addr gives the address it is to have (default 0, synth's default).

dump prints the table as 'readelf --sframe' does: the header, then for each
function its PC, size and rows with the CFA, FP and RA rules. --json prints
the same data as one JSON object (fields documented in package sframe,
Table.WriteJSON; 'go doc github.com/sprof/sprof/sframe Table.WriteJSON').
Functions left out as malformed are counted, with how many of them use
constructs sprof does not model ("unsupported"), and listed at the end.

lookup prints the rule for each address (a file virtual address, hex with
0x or decimal): the function, the row, and how to recover the CFA, the
return address and the frame pointer ("*(...)" reads memory, "same" is an
unchanged value; for the RA on aarch64: still in the link register).

synth builds the SFrame table of a binary from its DWARF call frame
information (.eh_frame, and .debug_frame for code .eh_frame does not cover)
and writes it to OUT (- for standard output) as a raw SFrame section of the given version (default
2), with function addresses relative to ADDR (default 0, the address
'objcopy --add-section .sframe=OUT BINARY COPY' gives a new section; V1 and
V2 need functions within 2 GiB of it). It prints how much of the code the
table covers and, by reason, the rows SFrame cannot express (DWARF
expressions, a CFA on another register, ...), which are left out rather
than guessed. amd64 PLT stubs get the PCMASK rows GNU ld writes. A
malformed FDE or CIE is left out and counted, and the rest is kept; synth
fails when no function is left.
`

func runSFrame(e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand: dump, lookup or synth")
	}
	switch args[0] {
	case "dump":
		return runSFrameDump(e, args[1:])
	case "lookup":
		return runSFrameLookup(e, args[1:])
	case "synth":
		return runSFrameSynth(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, sframeUsage)
		return nil
	}
	return usagef("unknown subcommand %q: use dump, lookup or synth", args[0])
}

func runSFrameDump(e *env, args []string) error {
	fs := newFlagSet(e, "sframe dump", sframeUsage)
	asJSON := fs.Bool("json", false, "print JSON instead of readelf's text")
	addr := sectionAddrFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("dump takes one FILE")
	}
	t, err := sframe.OpenAt(fs.Arg(0), *addr)
	if err != nil {
		return err
	}
	if *asJSON {
		return t.WriteJSON(e.stdout)
	}
	return t.WriteText(e.stdout)
}

func runSFrameLookup(e *env, args []string) error {
	fs := newFlagSet(e, "sframe lookup", sframeUsage)
	addr := sectionAddrFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return usagef("lookup takes a FILE and at least one ADDR")
	}
	var addrs []uint64
	for _, a := range fs.Args()[1:] {
		v, err := strconv.ParseUint(a, 0, 64)
		if err != nil {
			return usagef("bad address %q: want hex with 0x or decimal", a)
		}
		addrs = append(addrs, v)
	}
	t, err := sframe.OpenAt(fs.Arg(0), *addr)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		r, ok := t.Lookup(a)
		if !ok {
			fmt.Fprintf(e.stdout, "%#x: no rule (no function, or before its first row)\n", a)
			continue
		}
		fmt.Fprintf(e.stdout, "%#x: %s\n", a, t.Describe(r))
	}
	return nil
}

// sectionAddrFlag adds --addr: the address of a raw SFrame section.
func sectionAddrFlag(fs *pflag.FlagSet) *uint64 {
	return fs.Uint64("addr", 0, "address of a raw SFrame section FILE, which its function addresses are relative to")
}

func runSFrameSynth(e *env, args []string) error {
	fs := newFlagSet(e, "sframe synth", sframeUsage)
	out := fs.StringP("output", "o", "", "write the SFrame section to this `file`")
	version := fs.Uint8("version", 2, "SFrame version to write: 1, 2 or 3")
	addrFlag := fs.String("addr", "0", "address the section will have (hex with 0x or decimal)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("synth takes one BINARY")
	}
	if *out == "" {
		return usagef("synth needs -o OUT")
	}
	if *version < 1 || *version > 3 {
		return usagef("--version must be 1, 2 or 3, not %d", *version)
	}
	addr, err := strconv.ParseUint(*addrFlag, 0, 64)
	if err != nil {
		return usagef("bad --addr %q: want hex with 0x or decimal", *addrFlag)
	}
	ef, err := elf.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer ef.Close()
	t, st, err := synth.FromELF(ef)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if len(t.FDEs()) == 0 {
		st.WriteText(e.stderr)
		return fmt.Errorf("%s: no function has unwind rows SFrame can express (%d FDEs, %d malformed); wrote nothing", fs.Arg(0), st.FDEs, st.BadFDEs)
	}
	data, err := t.Encode(sframe.Version(*version), addr)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	f, err := outfile.Create(*out, e.stdout)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	// With -o -, the section is on standard output: the report goes to
	// standard error.
	report := e.stdout
	if *out == outfile.Stdout {
		report = e.stderr
	}
	fmt.Fprintf(report, "%s: wrote %d bytes of SFrame V%d to %s\n", fs.Arg(0), len(data), *version, f.Name())
	return st.WriteText(report)
}
