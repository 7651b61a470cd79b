package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/sprof/sprof/symbolize"
	"github.com/sprof/sprof/symbolize/debuginfod"
	"github.com/sprof/sprof/unwind"
)

// Symbolizer kinds of --symbolizer.
const (
	symbolizerGSYM = "gsym"
	symbolizerELF  = "elf"
)

// symbolizerFlags are --symbolizer and --cache-dir, which every command
// that symbolizes takes.
type symbolizerFlags struct {
	kind, cacheDir string
	// cacheBytes bounds the symbol tables held in memory; 0 means
	// symbolize.DefaultCacheBytes. The agent sets it from --symbol-cache.
	cacheBytes int64
}

// add defines the flags on fs.
func (f *symbolizerFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kind, "symbolizer", symbolizerGSYM, "gsym: convert each binary's debug info once into a GSYM file in --cache-dir, fast on later runs; elf: read it on every run")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "where --symbolizer gsym keeps its files, and sprof the unwind tables it built, in unwind/, for later runs to read instead of building them again (default /var/cache/sprof as root, else $XDG_CACHE_HOME/sprof or ~/.cache/sprof)")
}

// check checks the value of --symbolizer.
func (f *symbolizerFlags) check() error {
	if f.kind != symbolizerGSYM && f.kind != symbolizerELF {
		return usagef("--symbolizer %q: one of %s, %s", f.kind, symbolizerGSYM, symbolizerELF)
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
func (f *symbolizerFlags) newSymbolizer(e *env, cmd string) symbolize.Symbolizer {
	opts := symbolize.Options{CacheBytes: f.cacheBytes}
	if f.kind == symbolizerGSYM {
		s, err := symbolize.NewGSYM(symbolize.GSYMOptions{Options: opts, CacheDir: f.cacheDir, Debuginfod: debuginfod.FromEnv(""),
			Warnings: &prefixWriter{w: e.stderr, prefix: "sprof " + cmd + ": "}})
		if err == nil {
			return s
		}
		fmt.Fprintf(e.stderr, "sprof %s: symbols are read without a cache: %v\n", cmd, err)
	}
	return symbolize.NewELF(opts)
}

// unwindStore returns where built unwind tables are kept: unwind/ in
// --cache-dir. Building libLLVM's table takes a second of CPU and about
// 100 MiB of heap, and seconds more on a busy host, during which the
// stacks through it are partial; read from the store, it takes
// milliseconds. Where the directory cannot be made, or sprof cannot name
// itself (the tables are kept per sprof executable), sprof says so and
// builds every table.
func (f *symbolizerFlags) unwindStore(e *env, cmd string) *unwind.Store {
	dir := f.cacheDir
	if dir == "" {
		d, err := symbolize.DefaultCacheDir()
		if err != nil {
			fmt.Fprintf(e.stderr, "sprof %s: unwind tables are built on every run: %v\n", cmd, err)
			return nil
		}
		dir = d
	}
	producer, err := goBuildID("/proc/self/exe")
	if err == nil {
		var s *unwind.Store
		if s, err = unwind.OpenStore(filepath.Join(dir, "unwind"), producer); err == nil {
			return s
		}
	}
	fmt.Fprintf(e.stderr, "sprof %s: unwind tables are built on every run: %v\n", cmd, err)
	return nil
}

// prefixWriter puts prefix before each write, each a line of a package's
// warnings, so they read like sprof's own.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
