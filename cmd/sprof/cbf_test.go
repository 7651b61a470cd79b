package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCBFDecode(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		// The all-instructions vector of cbf.md, in Swift's base64.
		{[]string{"AhEQACAQIf8ANX//AAAQ8ERhA+gpICCAERAQiAkB"}, 0, []string{"record 1: bytes 0-30, 19 frames",
			"async  0x00007fff00002000", "omit   1000 frames", "#17  pc     0x0000000000003030", "truncated"}},
		{[]string{"02 12 00 99 99 00 02 23 81 00 00 00 00"}, 0, []string{"record 2: bytes 6-13, 1 frames",
			"#0   ra     0xffffffff81000000"}},
		// A Swift 6.2 record has no end byte: an error, unless --swift.
		{[]string{"0212009999"}, 1, []string{"opcode at offset 5: input ends before end or trunc"}},
		{[]string{"--swift", "0212009999"}, 0, []string{"2 frames as Swift reads them", "pc     0x0000000000009999", "truncated"}},
		{[]string{"--format", "xml", "00"}, 2, []string{"--format"}},
		// An argument that is neither a file nor a record is quoted
		// whole, and fails even with --swift.
		{[]string{"zz!"}, 1, []string{`sprof cbf: "zz!": no such file, nor a CBF record in hex, base64 or JSON`}},
		{[]string{"--swift", "crash"}, 1, []string{`sprof cbf: "crash": no such file`}},
		{[]string{"--swift", "/tmp/no/such/backtrace-file"}, 1, []string{`"/tmp/no/such/backtrace-file": no such file`}},
		{[]string{"--swift", "no-such-backtrace.json"}, 1, []string{`"no-such-backtrace.json": no such file`}},
	} {
		code, out, errOut := runSprof(append([]string{"cbf", "decode"}, c.args...)...)
		all := out + errOut
		if code != c.code {
			t.Errorf("cbf decode %v: exit %d, want %d\n%s", c.args, code, c.code, all)
		}
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("cbf decode %v: output lacks %q:\n%s", c.args, w, all)
			}
		}
	}
}

func TestCBFDecodeJSONFile(t *testing.T) {
	// A Swift backtrace with its image map: frames get image and offset.
	json := `{"architecture":"x86_64","backtrace":"AhVVVVVVUakhAIclKqqiLUtgIQCwJdVVXdKyRQA",` +
		`"imageMap":"AiZMaW51eCAoRGViaWFuIEdOVS9MaW51eCAxMiAoYm9va3dvcm0pKQMpVVVVVUAAIAAUAQIDBAUGBwgJCgsMDQ4PEBESExQNL2hvbWUvdS9hLm91dAAqf//3wAAAGVAAFCEiIyQlJicoKSorLC0uLzAxMjM0gRsveDg2XzY0LWxpbnV4LWdudS9saWJjLnNvLjYAkjwwAALAAACBohUvbGQtbGludXgteDg2LTY0LnNvLjIA"}`
	name := filepath.Join(t.TempDir(), "bt.json")
	if err := os.WriteFile(name, []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runSprof("cbf", "decode", name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"architecture x86_64", "pc     0x00005555555551a9  a.out+0x11a9", "ra     0x00007ffff7829d90  [unknown]"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestInfo(t *testing.T) {
	fixture := "../../testdata/cbf/gobuild.sprof"
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runSprof("info", fixture)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"samples       735 (0 lost)", "processes     94", "duration      19.578s", "bytes/sample  34.8",
		"bytes         stacks 68% (17335), samples 21% (5425), processes 11% (2776), header 0% (40), end 0% (18)", "closed cleanly"} {
		if !strings.Contains(out, w) {
			t.Errorf("info lacks %q:\n%s", w, out)
		}
	}
	cut := filepath.Join(t.TempDir(), "cut.sprof")
	if err := os.WriteFile(cut, data[:20000], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runSprof("info", cut)
	if code != 0 || !strings.Contains(out, "damaged       offsets 19768 to 20000 (232 bytes skipped)") {
		t.Errorf("info of a cut file: exit %d\n%s", code, out)
	}
	if code, _, _ := runSprof("info"); code != 2 {
		t.Errorf("info without a file: exit %d", code)
	}
}
