package sframe

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// fixtureRelease is the binutils release whose readelf wrote the golden
// dump of a fixture of each SFrame version (scripts/sframe-fixtures.sh).
var fixtureRelease = map[string]string{"v1": "2.40", "v2": "2.44", "v3": "2.47"}

// readelfFor returns the readelf that decodes a fixture's architecture.
func readelfFor(bin string) string {
	if strings.Contains(filepath.Base(bin), "arm64") {
		return "aarch64-linux-gnu-readelf"
	}
	return "readelf"
}

// TestReadelfLive runs the installed readelf --sframe on the fixtures its
// release wrote the goldens of (on Debian 12, binutils 2.40: the V1
// fixtures) and wants the committed golden and our dump to equal its
// output. The goldens of the other versions come from the trixie and sid
// chroots of scripts/sframe-fixtures.sh; this test shows they are what
// readelf prints, not what we wish it printed.
func TestReadelfLive(t *testing.T) {
	ran := 0
	releases := map[string]string{} // of each readelf
	for _, bin := range fixtures(t) {
		re := testenv.RequireTool(t, readelfFor(bin))
		release, ok := releases[re]
		if !ok {
			version, err := exec.Command(re, "--version").Output()
			if err != nil {
				t.Fatalf("%s --version: %v", re, err)
			}
			release = regexp.MustCompile(`\b2\.\d+`).FindString(string(version))
			releases[re] = release
		}
		name := filepath.Base(bin)
		if fixtureRelease[name[strings.LastIndexByte(name, '-')+1:]] != release {
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			// readelf prints the path it was given: run it where the
			// golden was made, on the bare name.
			cmd := exec.Command(re, "--sframe", name)
			cmd.Dir = filepath.Dir(bin)
			live, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s --sframe %s: %v", re, name, err)
			}
			if golden := readFile(t, bin+".readelf"); !bytes.Equal(live, golden) {
				t.Errorf("%s %s differs from the golden:\n%s", re, release, lineDiff(string(golden), string(live)))
			}
			tab, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			var ours bytes.Buffer
			if err := tab.WriteText(&ours); err != nil {
				t.Fatal(err)
			}
			if ours.String() != string(live) {
				t.Errorf("our dump differs from %s %s:\n%s", re, release, lineDiff(string(live), ours.String()))
			}
		})
	}
	if ran == 0 {
		testenv.Unavailable(t, "the installed readelf is none of the releases that wrote the goldens (2.40, 2.44, 2.47)")
	}
}

// TestUnwindLiveStacks runs each C fixture (amd64 natively, aarch64 under
// qemu-aarch64 with Debian's cross libc) so that it writes a fresh stack
// dump from its innermost function, at addresses ASLR chose this time,
// and unwinds it: the frames must be exactly the return addresses the
// compiler reported.
func TestUnwindLiveStacks(t *testing.T) {
	for _, bin := range stackDumps(t) {
		name := filepath.Base(bin)
		t.Run(name, func(t *testing.T) {
			abs, err := filepath.Abs(bin)
			if err != nil {
				t.Fatal(err)
			}
			dump := filepath.Join(t.TempDir(), name+".stack")
			var cmd *exec.Cmd
			switch {
			case strings.Contains(name, "arm64"):
				qemu := testenv.RequireTool(t, "qemu-aarch64")
				const sysroot = "/usr/aarch64-linux-gnu" // libc6-arm64-cross
				if _, err := os.Stat(sysroot + "/lib/ld-linux-aarch64.so.1"); err != nil {
					testenv.Unavailable(t, "no aarch64 libc in "+sysroot+" (libc6-arm64-cross)")
				}
				cmd = exec.Command(qemu, "-L", sysroot, abs, dump)
			case runtime.GOARCH == "amd64":
				cmd = exec.Command(abs, dump)
			default:
				testenv.Unavailable(t, "amd64 fixtures run natively only on amd64")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", cmd, err, out)
			}
			d := readStackDump(t, dump)
			tab, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			u := unwinderFor(t, bin, tab, d)
			out := make([]uint64, 64)
			n, stop := u.Unwind(d.regs, &d.stack, out)
			if !slices.Equal(out[:n], d.frames) || stop != StopNoMapping {
				t.Errorf("unwound %#x (%v),\nwant %#x (%v)", out[:n], stop, d.frames, StopNoMapping)
			}
		})
	}
}
