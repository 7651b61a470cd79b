package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sprof/sprof/agent"
	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/stacks"
)

// replay stands in for agent.OpenBPF: every interval, one stack of nginx.
type replay struct{}

func (replay) Drain() error { return nil }

func (replay) Cut() agent.Interval {
	exe := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, File: "/usr/sbin/nginx"}
	loc := &stacks.Location{Mapping: exe, Address: 0x1100, Frames: []stacks.Frame{{Function: "ngx_worker_process_cycle"}}}
	p := &stacks.Profile{Start: time.Now(), Duration: time.Second, Period: time.Second / 19, Mappings: []*stacks.Mapping{exe},
		Samples: []*stacks.Sample{{Stack: []*stacks.Location{loc}, Count: 19, Pid: 80, Tid: 80, Comm: "nginx"}}}
	return interval{p}
}

// interval is a replayed interval, its frames named already.
type interval struct{ p *stacks.Profile }

func (iv interval) Resolve(context.Context) *stacks.Profile { return iv.p }
func (iv interval) Stats() collector.Stats                  { return collector.Stats{Samples: 19} }

func (replay) SymbolizerStats() agent.SymbolizerStats { return agent.SymbolizerStats{} }

// Profile continuously into a directory of pprof files; stopping the agent
// (SIGTERM in `sprof agent`) writes the interval under way.
func Example() {
	dir, err := os.MkdirTemp("", "sprof-agent")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	a, err := agent.New(replay{}, agent.Config{Interval: 15 * time.Second, OutputDir: dir, Keep: 96})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	stop() // at once: only the final interval is written
	a.Run(ctx)
	files, _ := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
	for _, f := range files {
		_, service, _ := strings.Cut(filepath.Base(f), "_")
		fmt.Println(service)
	}
	// Output: nginx.pb.gz
}
