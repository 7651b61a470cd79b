package exporters_test

import (
	"fmt"
	"os"
	"time"

	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/stacks"
)

func Example() {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x401000, File: "/usr/bin/app"}
	main := &stacks.Location{Mapping: exe, Address: 0x400100, Frames: []stacks.Frame{{Function: "main"}}}
	work := &stacks.Location{Mapping: exe, Address: 0x400200, Frames: []stacks.Frame{
		{Function: "hash"}, // inlined into work
		{Function: "work"},
	}}
	p := &stacks.Profile{
		Period:   time.Second / 99,
		Mappings: []*stacks.Mapping{exe},
		Samples: []*stacks.Sample{
			{Stack: []*stacks.Location{work, main}, Count: 3, Pid: 7, Tid: 7, Comm: "app"},
			{Stack: []*stacks.Location{main}, Count: 1, Pid: 7, Tid: 8, Comm: "app"},
		},
	}
	format, err := exporters.FormatFromPath("out.folded")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := exporters.Write(os.Stdout, p, format, exporters.Options{ProcessRoot: exporters.CommRoot}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// app;main 1
	// app;main;work;hash_[i] 3
}
