package collector_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sprof/sprof/collector"
)

// replay is a Source that hands over one recorded sample.
type replay struct{ done bool }

func (r *replay) Read(fn func(*collector.Sample)) (int, error) {
	if r.done {
		return 0, nil
	}
	r.done = true
	s := collector.Sample{Pid: 1 << 30, Tid: 1 << 30, User: []uint64{0x401000}}
	copy(s.Comm[:], "demo")
	fn(&s)
	return 1, nil
}

func (r *replay) Lost() (uint64, error) { return 0, nil }

// Record for a moment from a Source (in sprof, the BPF sampler) and print
// the profile's samples.
func Example() {
	c, err := collector.New(collector.Options{Frequency: 99, NoSideband: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	prof, stats, err := c.Run(ctx, &replay{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range prof.Samples {
		fmt.Println(s.Comm, s.Count, s.Stack[0].Placeholder())
	}
	fmt.Println(stats.Samples, "sample")
	// Output:
	// demo 1 [unknown] 0x401000
	// 1 sample
}
