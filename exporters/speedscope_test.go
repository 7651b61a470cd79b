package exporters

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/sprof/sprof/stacks"
)

// speedscopeSchema compiles the copy of speedscope's published JSON schema
// kept under testdata (see testdata/exporters/README.md).
func speedscopeSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "testdata", "exporters", "speedscope-file-format-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsonschema.NewCompiler().Compile(path)
	if err != nil {
		t.Fatalf("compile speedscope's schema: %v", err)
	}
	return s
}

// checkSpeedscope validates out against the schema and then checks what
// the schema cannot say but speedscope's importer needs: as many weights as
// samples, frame indices inside the shared table, positive weights, and an
// endValue equal to the sum of the weights.
func checkSpeedscope(t *testing.T, schema *jsonschema.Schema, out []byte) speedscopeFile {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if err := schema.Validate(doc); err != nil {
		t.Fatalf("speedscope's schema rejects our file: %v", err)
	}
	var f speedscopeFile
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Profiles {
		if len(p.Samples) != len(p.Weights) {
			t.Errorf("profile %q: %d samples, %d weights", p.Name, len(p.Samples), len(p.Weights))
		}
		var sum int64
		for i, s := range p.Samples {
			for _, id := range s {
				if id < 0 || id >= len(f.Shared.Frames) {
					t.Errorf("profile %q sample %d: frame %d not in the table of %d", p.Name, i, id, len(f.Shared.Frames))
				}
			}
			if p.Weights[i] <= 0 {
				t.Errorf("profile %q sample %d: weight %d", p.Name, i, p.Weights[i])
			}
			sum += p.Weights[i]
		}
		if p.EndValue-p.StartValue != sum {
			t.Errorf("profile %q: values %d..%d, weights sum to %d", p.Name, p.StartValue, p.EndValue, sum)
		}
	}
	return f
}

func TestSpeedscopeGolden(t *testing.T) {
	schema := speedscopeSchema(t)
	var buf bytes.Buffer
	if err := Write(&buf, fixture(), Speedscope, Options{}); err != nil {
		t.Fatal(err)
	}
	f := checkSpeedscope(t, schema, buf.Bytes())
	if len(f.Profiles) != 2 || f.Profiles[0].Name != "app (pid 42)" || f.Profiles[1].Name != "kworker/0:1 x (pid 7)" {
		t.Errorf("profiles %+v, want app then kworker", f.Profiles)
	}
	var names []string
	for _, id := range f.Profiles[0].Samples[0] {
		names = append(names, f.Shared.Frames[id].Name)
	}
	if got := len(names); got != 4 || names[0] != "main" || names[3] != "hash" {
		t.Errorf("first stack %q, want main, work(int), mix;step next, hash (root first, inline levels expanded)", names)
	}
	checkGolden(t, "fixture.speedscope.json", buf.Bytes())
}

func TestSpeedscopeEdgeCases(t *testing.T) {
	schema := speedscopeSchema(t)
	for name, p := range map[string]*stacks.Profile{
		"empty":     {Period: 1e7},
		"no frames": {Period: 1e7, Samples: []*stacks.Sample{{Count: 1, Comm: "x\xff"}}},
		"synthetic": syntheticProfile(2000),
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSpeedscope(&buf, p, Options{ProcessRoot: CommRoot}); err != nil {
				t.Fatal(err)
			}
			checkSpeedscope(t, schema, buf.Bytes())
		})
	}
}

// TestSpeedscopeSchemaRejects makes sure the schema check can fail.
func TestSpeedscopeSchemaRejects(t *testing.T) {
	schema := speedscopeSchema(t)
	for _, doc := range []string{
		`{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{"frames":[]},"profiles":[{"type":"sampled","name":"x","unit":"furlongs","startValue":0,"endValue":0,"samples":[],"weights":[]}]}`,
		`{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{"frames":[]},"profiles":[{"type":"sampled","name":"x","unit":"none","startValue":0,"endValue":0,"samples":[]}]}`,
		`{"shared":{"frames":[]},"profiles":[]}`,
	} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		if err != nil {
			t.Fatal(err)
		}
		if schema.Validate(v) == nil {
			t.Errorf("schema accepts %s", doc)
		}
	}
}
