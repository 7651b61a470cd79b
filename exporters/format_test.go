package exporters

import (
	"bytes"
	"strings"
	"testing"
)

func TestFormatFromPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want Format
	}{
		{"cpu.pb.gz", Pprof}, {"/tmp/x.pprof", Pprof}, {"X.PB", Pprof},
		{"out.folded", Folded}, {"stacks.txt", Folded}, {"cpu.SVG", SVG},
		{"cpu.otlp.pb", OTLP}, {"CPU.OTLP", OTLP}, {"cpu.otlp.json", OTLPJSON}, {"cpu.speedscope.json", Speedscope},
	} {
		got, err := FormatFromPath(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("FormatFromPath(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	for _, path := range []string{"cpu", "cpu.gz", "cpu.json", "pb.gz/"} {
		_, err := FormatFromPath(path)
		if err == nil || !strings.Contains(err.Error(), ".pb.gz") || !strings.Contains(err.Error(), "folded") {
			t.Errorf("FormatFromPath(%q): error %v, want one listing the endings and formats", path, err)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats() {
		if got, err := ParseFormat(string(f)); err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %q, %v", f, got, err)
		}
	}
	if _, err := ParseFormat("flamegraph.pl"); err == nil || !strings.Contains(err.Error(), "pprof") {
		t.Errorf("ParseFormat of an unknown name: error %v, want one listing the formats", err)
	}
}

func TestWriteDispatches(t *testing.T) {
	for _, f := range Formats() {
		var buf bytes.Buffer
		if err := Write(&buf, fixture(), f, Options{}); err != nil || buf.Len() == 0 {
			t.Errorf("Write %s: %d bytes, %v", f, buf.Len(), err)
		}
	}
	if err := Write(&bytes.Buffer{}, fixture(), "nope", Options{}); err == nil {
		t.Error("Write accepted an unknown format")
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels("comm, tid,comm,container_id")
	if err != nil || len(got) != 3 || got[0] != LabelComm || got[1] != LabelTid || got[2] != LabelContainer {
		t.Errorf("ParseLabels = %v, %v", got, err)
	}
	if got, err := ParseLabels("none"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ParseLabels(none) = %#v, %v; want an empty non-nil list", got, err)
	}
	if _, err := ParseLabels("cpu"); err == nil {
		t.Error("ParseLabels accepted an unknown label")
	}
	for _, r := range []ProcessRoot{NoProcessRoot, CommRoot, CommPidRoot, ContainerCommRoot} {
		if got, err := ParseProcessRoot(r.String()); err != nil || got != r {
			t.Errorf("ParseProcessRoot(%q) = %v, %v", r, got, err)
		}
	}
	if _, err := ParseProcessRoot("pid"); err == nil {
		t.Error("ParseProcessRoot accepted an unknown root")
	}
}
