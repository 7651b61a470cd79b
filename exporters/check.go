package exporters

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/google/pprof/profile"
)

// CheckPprof runs the pprof library's CheckValid and then the checks it
// leaves out but consumers depend on: Pyroscope indexes tables by ID − 1
// and drops or rejects zero, negative and non-UTF-8 data, and pprof looks
// up a location's binary by its address. Every profile sprof writes or
// pushes passes it.
func CheckPprof(p *profile.Profile) error {
	if err := p.CheckValid(); err != nil {
		return err
	}
	if p.PeriodType == nil || p.Period <= 0 {
		return fmt.Errorf("period %d of type %v: want a positive period with a type", p.Period, p.PeriodType)
	}
	for i, vt := range append([]*profile.ValueType{p.PeriodType}, p.SampleType...) {
		if strings.Contains(vt.Type, "-") || strings.Contains(vt.Unit, "-") {
			return fmt.Errorf("value type %d %s/%s: '-' is not allowed", i, vt.Type, vt.Unit)
		}
		if err := checkUTF8("value type", vt.Type, vt.Unit); err != nil {
			return err
		}
	}
	for i, m := range p.Mapping {
		if m.ID != uint64(i+1) {
			return fmt.Errorf("mapping %d has ID %d: IDs must be dense from 1", i, m.ID)
		}
		if err := checkUTF8(fmt.Sprintf("mapping %d", m.ID), m.File, m.BuildID); err != nil {
			return err
		}
	}
	for i, f := range p.Function {
		if f.ID != uint64(i+1) {
			return fmt.Errorf("function %d has ID %d: IDs must be dense from 1", i, f.ID)
		}
		if err := checkUTF8(fmt.Sprintf("function %d", f.ID), f.Name, f.SystemName, f.Filename); err != nil {
			return err
		}
	}
	for i, l := range p.Location {
		if l.ID != uint64(i+1) {
			return fmt.Errorf("location %d has ID %d: IDs must be dense from 1", i, l.ID)
		}
		if err := checkLocation(l); err != nil {
			return err
		}
	}
	for i, s := range p.Sample {
		if err := checkSample(p, s); err != nil {
			return fmt.Errorf("sample %d: %w", i, err)
		}
	}
	return checkUTF8("comment", p.Comments...)
}

func checkLocation(l *profile.Location) error {
	m := l.Mapping
	if m == nil {
		return fmt.Errorf("location %d has no mapping", l.ID)
	}
	// A Limit of 2^64-1 stands for the end of the address space: a mapping
	// cannot say "up to 2^64" otherwise, and garbage return addresses such
	// as -1 land in the synthetic [unknown] mapping.
	if l.Address != 0 && (l.Address < m.Start || l.Address >= m.Limit && m.Limit != math.MaxUint64) {
		return fmt.Errorf("location %d: address %#x outside mapping %d [%#x, %#x) %s",
			l.ID, l.Address, m.ID, m.Start, m.Limit, m.File)
	}
	if l.Address == 0 && len(l.Line) == 0 {
		return fmt.Errorf("location %d has neither an address nor a line", l.ID)
	}
	return nil
}

func checkSample(p *profile.Profile, s *profile.Sample) error {
	for _, l := range s.Location {
		if l.ID == 0 || l.ID > uint64(len(p.Location)) || p.Location[l.ID-1] != l {
			return fmt.Errorf("location %d is not in the location table", l.ID)
		}
	}
	for j, v := range s.Value {
		if v <= 0 {
			return fmt.Errorf("value %d is %d: values must be positive", j, v)
		}
	}
	for k, vs := range s.Label {
		if len(vs) != 1 {
			return fmt.Errorf("label %q has %d values, want 1", k, len(vs))
		}
		if err := checkUTF8("label", k, vs[0]); err != nil {
			return err
		}
	}
	for k, vs := range s.NumLabel {
		if len(vs) != 1 {
			return fmt.Errorf("numeric label %q has %d values, want 1", k, len(vs))
		}
		if _, ok := s.Label[k]; ok {
			return fmt.Errorf("label %q is both a string and a number: pprof would count it twice", k)
		}
	}
	return nil
}

func checkUTF8(what string, ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%s: %q is not valid UTF-8", what, s)
		}
	}
	return nil
}
