package report_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
	"github.com/sprof/sprof/report"
)

// A recording made earlier becomes a profile: here with no symbolizer, so
// frames are named by their file and offset.
func Example() {
	var file bytes.Buffer
	start := time.Unix(1_700_000_000, 0)
	w, _ := recording.NewWriter(&file, recording.Options{Frequency: 99, Start: start})
	images, _ := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: "/usr/bin/app", Base: 0x401000, EndOfText: 0x480000, TextOffset: 0x1000},
	})
	w.Process(start, 42, "app", images)
	for i := range 3 {
		w.Sample(start.Add(time.Duration(i)*10*time.Millisecond), 42, 42, 0, "app", []uint64{0x401234, 0x401100}, nil, 0, 1)
	}
	w.Close()

	p, res, err := report.Read(&file, report.Options{})
	if err != nil {
		panic(err)
	}
	for _, s := range p.Samples {
		fmt.Println(s.Comm, s.Count, s.Stack[0].Placeholder(), s.Stack[1].Placeholder())
	}
	fmt.Println(res.Kept, "samples, damaged:", res.Damaged != 0)
	// Output:
	// app 3 app+0x1234 app+0x1100
	// 3 samples, damaged: false
}
