package recording

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"
)

// The fixture testdata/cbf/gobuild-v2.sprof is the perf fixture as sprof's
// version 2 writer wrote it, kept as it was: no writer of version 2 is left
// to rebuild it. It is how the reader is held to reading old recordings.
const (
	fixtureV2       = "../../testdata/cbf/gobuild-v2.sprof"
	fixtureV2Golden = "../../testdata/cbf/gobuild-v2.summary"
)

// TestVersion2Fixture reads the version 2 recording and checks it against
// its golden summary, then writes its samples and process records in the
// current version and checks that they read back the same, but for times
// cut to the microsecond.
func TestVersion2Fixture(t *testing.T) {
	data, err := os.ReadFile(fixtureV2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Version != 2 {
		t.Fatalf("%s is version %d", fixtureV2, s.Header.Version)
	}
	want, err := os.ReadFile(fixtureV2Golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaryText(s, int64(len(data))); got != string(want) {
		t.Errorf("summary\n%s\nwant (%s)\n%s", got, fixtureV2Golden, want)
	}
	_, samples, procs, _, err := readAll(t, data)
	if err != io.EOF || uint64(len(samples)) != s.Samples {
		t.Fatalf("read %d samples, %v", len(samples), err)
	}
	sortSamples(samples)
	var now bytes.Buffer
	replay(t, &now, samples, procs)
	_, samples3, procs3, _, err := readAll(t, now.Bytes())
	if err != io.EOF {
		t.Fatal(err)
	}
	sortSamples(samples3)
	if len(samples3) != len(samples) || len(procs3) != len(procs) {
		t.Fatalf("version %d: %d samples, %d process records; version 2: %d, %d", Version, len(samples3), len(procs3), len(samples), len(procs))
	}
	for i := range samples {
		s2 := samples[i]
		s2.t = s2.t.Truncate(time.Microsecond)
		if samples3[i].String() != s2.String() {
			t.Fatalf("sample %d:\n%v\nversion 2:\n%v", i, samples3[i], s2)
		}
	}
	for i, pr := range procs {
		p3 := procs3[i]
		if p3.PID != pr.PID || p3.Time != pr.Time.Truncate(time.Microsecond) || p3.Comm != pr.Comm || p3.Exited != pr.Exited ||
			p3.Kernel != pr.Kernel || (p3.Map == nil) != (pr.Map == nil) || p3.Map != nil && !p3.Map.Equal(pr.Map) {
			t.Errorf("process record %d: %+v; version 2: %+v", i, p3, pr)
		}
	}
	if now.Len() >= len(data) {
		t.Errorf("version %d takes %d bytes, version 2 %d", Version, now.Len(), len(data))
	}
}
