package exporters

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/sprof/sprof/stacks"
)

// FuzzEncoders feeds every encoder names as hostile as symbol tables and
// task comms can be — any bytes — and checks each output still parses
// with its format's own reader and keeps its structure.
func FuzzEncoders(f *testing.F) {
	for _, seed := range [][3]string{
		{"main", "app", "main.c"},
		{"a;b\nc", "x y", "dir/with;semi"},
		{"\xff\xfe", "\x00\x01", "\xc3"},
		{"<&>\"'", "]]>", "]]>"},
		{"", "", ""},
		{" 12", "-", "\t"},
		{"\u2028\ufffe", "comm-with-dash", "üñï"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, name, comm, file string) {
		exe := &stacks.Mapping{Kind: stacks.User, Start: 0x1000, Limit: 0x2000, File: file}
		kern := &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}
		loc := &stacks.Location{Mapping: exe, Address: 0x1010, Frames: []stacks.Frame{{Function: name, File: file, Line: 1}, {Function: name + "2"}}}
		k := &stacks.Location{Mapping: kern, Address: 0xffff0000, Frames: []stacks.Frame{{Function: name}}}
		p := &stacks.Profile{Period: 1e7, Samples: []*stacks.Sample{
			{Stack: []*stacks.Location{k, loc}, Count: 2, Comm: comm, Pid: 1},
			{Stack: []*stacks.Location{{Mapping: exe, Address: 0x1020}}, Count: 1, Comm: comm, Pid: 1, Truncated: true},
		}}
		opt := Options{ProcessRoot: CommPidRoot}

		var buf bytes.Buffer
		if err := WritePprof(&buf, p, opt); err != nil {
			t.Fatalf("pprof: %v", err)
		}
		pp, err := profile.Parse(&buf)
		if err != nil {
			t.Fatalf("pprof does not parse: %v", err)
		}
		if err := CheckPprof(pp); err != nil {
			t.Fatalf("pprof: %v", err)
		}

		buf.Reset()
		if err := WriteFolded(&buf, p, opt); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("folded output has %d lines, want 2:\n%q", len(lines), buf.String())
		}
		checkFoldedSyntax(t, buf.String())
		for _, l := range lines {
			// comm-pid, kernel, 2 inline levels; or comm-pid, [truncated], placeholder
			if n := strings.Count(l[:strings.LastIndexByte(l, ' ')], ";") + 1; n != 4 && n != 3 {
				t.Errorf("folded line %q has %d frames, want 4 or 3", l, n)
			}
			if root := l[:strings.IndexByte(l, ';')]; strings.ContainsAny(root, " \t") {
				t.Errorf("process root %q has blanks", root)
			}
		}

		buf.Reset()
		if err := WriteFlameGraph(&buf, p, opt); err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(&buf)
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("SVG is not well-formed: %v", err)
			}
		}

		buf.Reset()
		if err := WriteSpeedscope(&buf, p, opt); err != nil {
			t.Fatal(err)
		}
		var sf speedscopeFile
		if err := json.Unmarshal(buf.Bytes(), &sf); err != nil || len(sf.Profiles) != 1 {
			t.Fatalf("speedscope JSON: %v, %d profiles", err, len(sf.Profiles))
		}
	})
}
