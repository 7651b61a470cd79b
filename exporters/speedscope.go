package exporters

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/sprof/sprof/stacks"
)

// SpeedscopeSchema is the $schema speedscope files declare.
const SpeedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

// speedscopeFile is speedscope's JSON file format (its file-format-spec.ts).
type speedscopeFile struct {
	Schema             string              `json:"$schema"`
	Shared             speedscopeShared    `json:"shared"`
	Profiles           []speedscopeProfile `json:"profiles"`
	Name               string              `json:"name"`
	ActiveProfileIndex int                 `json:"activeProfileIndex"`
	Exporter           string              `json:"exporter"`
}

type speedscopeShared struct {
	Frames []speedscopeFrame `json:"frames"`
}

type speedscopeFrame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

type speedscopeProfile struct {
	Type       string  `json:"type"`
	Name       string  `json:"name"`
	Unit       string  `json:"unit"`
	StartValue int64   `json:"startValue"`
	EndValue   int64   `json:"endValue"`
	Samples    [][]int `json:"samples"`
	Weights    []int64 `json:"weights"`
}

// WriteSpeedscope writes p in speedscope's JSON format: one sampled
// profile per process, busiest first, so speedscope's profile menu picks
// the process; weights in nanoseconds of CPU time; stacks root first, with
// one frame per inline level (speedscope's own pprof import keeps only the
// outermost). A frame's file is its source file, or the binary when the
// symbol has none.
func WriteSpeedscope(w io.Writer, p *stacks.Profile, opt Options) error {
	frames := speedscopeFrames{index: map[speedscopeFrame]int{}}
	var profiles []speedscopeProfile
	var buf []frame
	var samples int64
	for _, proc := range byProcess(p.Samples) {
		sp := speedscopeProfile{Type: "sampled", Unit: "nanoseconds",
			Name: cleanName(proc[0].Comm) + " (pid " + strconv.FormatUint(uint64(proc[0].Pid), 10) + ")"}
		for _, ws := range aggregate(proc, opt.ProcessRoot) {
			buf = rootFirst(buf[:0], ws.sample, &opt)
			stack := make([]int, len(buf))
			for i, f := range buf {
				stack[i] = frames.id(f)
			}
			sp.Samples = append(sp.Samples, stack)
			sp.Weights = append(sp.Weights, ws.count*p.Period.Nanoseconds())
			sp.EndValue += ws.count * p.Period.Nanoseconds()
			samples += ws.count
		}
		if len(sp.Samples) > 0 {
			profiles = append(profiles, sp)
		}
	}
	slices.SortStableFunc(profiles, func(a, b speedscopeProfile) int { return cmp.Compare(b.EndValue, a.EndValue) })

	file := speedscopeFile{
		Schema:   SpeedscopeSchema,
		Shared:   speedscopeShared{Frames: frames.list},
		Profiles: profiles,
		Name:     "sprof: " + describe(p, samples, true),
		Exporter: "sprof",
	}
	if file.Shared.Frames == nil {
		file.Shared.Frames = []speedscopeFrame{}
	}
	if file.Profiles == nil {
		file.Profiles = []speedscopeProfile{}
	}
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(&file); err != nil {
		return fmt.Errorf("write speedscope: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write speedscope: %w", err)
	}
	return nil
}

// speedscopeFrames is the shared frame table under construction.
type speedscopeFrames struct {
	list  []speedscopeFrame
	index map[speedscopeFrame]int
}

func (t *speedscopeFrames) id(f frame) int {
	sf := speedscopeFrame{Name: cleanName(f.name)}
	switch {
	case f.src != nil && f.src.File != "":
		sf.File, sf.Line = cleanName(f.src.File), f.src.Line
	case f.loc != nil && f.loc.Mapping != nil:
		sf.File = cleanName(f.loc.Mapping.File)
	}
	if id, ok := t.index[sf]; ok {
		return id
	}
	id := len(t.list)
	t.list = append(t.list, sf)
	t.index[sf] = id
	return id
}

// byProcess splits samples by process ID, in order of first appearance.
func byProcess(samples []*stacks.Sample) [][]*stacks.Sample {
	index := map[uint32]int{}
	var out [][]*stacks.Sample
	for _, s := range samples {
		i, ok := index[s.Pid]
		if !ok {
			i = len(out)
			index[s.Pid] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], s)
	}
	return out
}
