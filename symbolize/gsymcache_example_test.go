package symbolize_test

import (
	"fmt"
	"os"

	"github.com/sprof/sprof/symbolize"
)

func ExampleGSYM() {
	cache, err := os.MkdirTemp("", "sprof-cache")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(cache)
	s, err := symbolize.NewGSYM(symbolize.GSYMOptions{CacheDir: cache})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The first lookup converts the binary into cache/gsym/BUILDID.gsym;
	// later symbolizers on the same cache map that file.
	bin := symbolize.Binary{Path: "../testdata/symbolize/c-O2", BuildID: "db5a3c5d3c8aa13e84bf9a60585564a67fc1f7ce"}
	frames, err := s.Symbolize(nil, bin, 0x10a0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range frames {
		fmt.Printf("%s %s:%d\n", f.Function, f.File, f.Line)
	}
	fmt.Printf("%+v\n", s.Stats())
	// Output:
	// main scripts/symbolize/chain.c:76
	// {Converted:1 Reused:0 Failed:0}
}
