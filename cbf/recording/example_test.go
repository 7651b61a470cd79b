package recording_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sprof/sprof/cbf"
	"github.com/sprof/sprof/cbf/recording"
)

// A collector writes the processes it sees and the samples it takes; a
// reader, later, gets them back.
func Example() {
	var file bytes.Buffer
	start := time.Unix(1_700_000_000, 0)
	w, err := recording.NewWriter(&file, recording.Options{
		Host: "web1", Kernel: "6.18.0", Arch: "x86_64", Frequency: 99, Start: start,
	})
	if err != nil {
		panic(err)
	}
	images, _ := cbf.NewImageMap("", cbf.Word64, []cbf.Image{
		{Path: "/usr/bin/app", BuildID: []byte{0xab, 0xcd}, Base: 0x401000, EndOfText: 0x480000, TextOffset: 0x1000},
	})
	w.Process(start, 42, "app", images)
	user := []uint64{0x401234, 0x401100, 0x401085} // leaf first
	for i := range 3 {
		w.Sample(start.Add(time.Duration(i)*10*time.Millisecond), 42, 42, 0, "app", user, nil, 0, 1)
	}
	w.Close()

	s, _ := recording.Summarize(&file)
	fmt.Printf("%s: %d samples, %d processes, %d images, closed: %v\n",
		s.Header.Host, s.Samples, s.Processes, s.Images, s.End != nil)
	// Output: web1: 3 samples, 1 processes, 1 images, closed: true
}
