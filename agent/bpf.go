package agent

import (
	"github.com/sprof/sprof/pipeline"
)

// BPF is the agent's Recorder on a real host: a pipeline.Pipeline (BPF
// sampler, collector, unwinder, symbolizer) opened once for the agent's
// life.
type BPF struct {
	*pipeline.Pipeline
}

// OpenBPF opens the pipeline cfg describes. A Symbolizer is needed for
// the agent's whole life, so its caches must be bounded (the
// Options.CacheBytes of symbolize.GSYM and symbolize.ELF).
func OpenBPF(cfg pipeline.Config) (*BPF, error) {
	p, err := pipeline.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &BPF{p}, nil
}

// Cut implements Recorder.
func (r *BPF) Cut() Interval { return r.Pipeline.Cut() }
