package main

import (
	"debug/elf"
	"fmt"
	"os"
	"strconv"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/sframe/synth"
)

const sframeUsage = `Usage:
  sprof sframe dump FILE [--json]
  sprof sframe lookup FILE ADDR...
  sprof sframe synth BINARY -o OUT [--version 1|2|3] [--addr ADDR]

Reads the SFrame unwind table (.sframe, SFrame versions 1 to 3) of a linked
ELF executable or shared object, as GNU binutils 2.40 and later write it
with 'as --gsframe'.

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
and writes it to OUT as a raw SFrame section of the given version (default
2), with function addresses relative to ADDR (default 0, the address
'objcopy --add-section .sframe=OUT BINARY COPY' gives a new section; V1 and
V2 need functions within 2 GiB of it). It prints how much of the code the
table covers and, by reason, the rows SFrame cannot express (DWARF
expressions, a CFA on another register, ...), which are left out rather
than guessed. amd64 PLT stubs get the PCMASK rows GNU ld writes.
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("dump takes one FILE")
	}
	t, err := sframe.Open(fs.Arg(0))
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
	t, err := sframe.Open(fs.Arg(0))
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
	data, err := t.Encode(sframe.Version(*version), addr)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: wrote %d bytes of SFrame V%d to %s\n", fs.Arg(0), len(data), *version, *out)
	return st.WriteText(e.stdout)
}
