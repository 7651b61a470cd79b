package main

import (
	"fmt"
	"strconv"

	"github.com/sprof/sprof/sframe"
)

const sframeUsage = `Usage:
  sprof sframe dump FILE [--json]
  sprof sframe lookup FILE ADDR...

Reads the SFrame unwind table (.sframe, SFrame versions 1 to 3) of a linked
ELF executable or shared object, as GNU binutils 2.40 and later write it
with 'as --gsframe'.

dump prints the table as 'readelf --sframe' does: the header, then for each
function its PC, size and rows with the CFA, FP and RA rules. --json prints
the same data as one JSON object (fields documented in package sframe,
Table.WriteJSON). Functions left out as malformed are listed at the end.

lookup prints the rule for each address (a file virtual address, hex with
0x or decimal): the function, the row, and how to recover the CFA, the
return address and the frame pointer ("*(...)" reads memory, "same" is an
unchanged value; for the RA on aarch64: still in the link register).
`

func runSFrame(e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand: dump or lookup")
	}
	switch args[0] {
	case "dump":
		return runSFrameDump(e, args[1:])
	case "lookup":
		return runSFrameLookup(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, sframeUsage)
		return nil
	}
	return usagef("unknown subcommand %q: use dump or lookup", args[0])
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
