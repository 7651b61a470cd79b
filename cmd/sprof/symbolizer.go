package main

import (
	"fmt"

	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/debuginfod"
)

// Symbolizer kinds of --symbolizer.
const (
	symbolizerGSYM = "gsym"
	symbolizerELF  = "elf"
)

// checkSymbolizer checks the value of --symbolizer.
func checkSymbolizer(kind string) error {
	if kind != symbolizerGSYM && kind != symbolizerELF {
		return usagef("--symbolizer %q: one of %s, %s", kind, symbolizerGSYM, symbolizerELF)
	}
	return nil
}

// newSymbolizer returns the user-space symbolizer --symbolizer names. GSYM
// is the default: a binary's DWARF is read once per host, and later runs
// map the converted file in about a millisecond instead of reading DWARF
// for hundreds of milliseconds per large binary. When its cache directory
// cannot be made (a read-only file system), sprof says so and reads DWARF
// as the ELF symbolizer does. Debug files missing on the host are fetched
// from the servers in DEBUGINFOD_URLS, if set, into the same cache.
func newSymbolizer(e *env, cmd, kind, cacheDir string) symbolize.Symbolizer {
	if kind == symbolizerGSYM {
		s, err := symbolize.NewGSYM(symbolize.GSYMOptions{CacheDir: cacheDir, Debuginfod: debuginfod.FromEnv("")})
		if err == nil {
			return s
		}
		fmt.Fprintf(e.stderr, "sprof %s: symbols are read without a cache: %v\n", cmd, err)
	}
	return symbolize.NewELF(symbolize.Options{})
}
