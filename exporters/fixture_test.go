package exporters

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprof/sprof/exporters/internal/golden"
	"github.com/sprof/sprof/internal/testenv"
	"github.com/sprof/sprof/stacks"
)

// fixture is a small profile with every kind of frame: a symbolized
// executable with inline levels and a name containing `;` and a newline,
// a library no symbol covers, kernel frames, an unknown address, a
// truncated stack, and two threads of one process, which runs in a
// container.
func fixture() *stacks.Profile {
	app := &stacks.Mapping{Kind: stacks.User, Start: 0x400000, Limit: 0x500000, Offset: 0x1000,
		File: "/usr/bin/app", BuildID: "0123456789abcdef0123456789abcdef01234567"}
	libc := &stacks.Mapping{Kind: stacks.User, Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x28000,
		File: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: "fedcba9876543210fedcba9876543210fedcba98"}
	kern := &stacks.Mapping{Kind: stacks.Kernel, File: stacks.KernelFile}
	unknown := &stacks.Mapping{Kind: stacks.Unknown, File: stacks.UnknownFile}

	mainLoc := &stacks.Location{Mapping: app, Address: 0x401000,
		Frames: []stacks.Frame{{Function: "main", File: "app.c", Line: 40}}}
	work := &stacks.Location{Mapping: app, Address: 0x401234, Frames: []stacks.Frame{
		{Function: "hash", File: "hash.h", Line: 7},                                // inlined into
		{Function: "mix;step\nnext", File: "work.c", Line: 12},                     // inlined into
		{Function: "work(int)", SystemName: "_Z4worki", File: "work.c", Line: 22}}} // physical
	write := &stacks.Location{Mapping: libc, Address: 0x7f0000012345}
	sysWrite := &stacks.Location{Mapping: kern, Address: 0xffffffff81001000,
		Frames: []stacks.Frame{{Function: "ksys_write"}}}
	entry := &stacks.Location{Mapping: kern, Address: 0xffffffff81000100,
		Frames: []stacks.Frame{{Function: "entry_SYSCALL_64"}}}
	kunsym := &stacks.Location{Mapping: kern, Address: 0xffffffffc0001234}
	jit := &stacks.Location{Mapping: unknown, Address: 0x12345678}

	return &stacks.Profile{
		Start:    time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Duration: 10 * time.Second,
		Period:   time.Second / 99,
		Mappings: []*stacks.Mapping{app, libc, kern, unknown},
		Lost:     3,
		Samples: []*stacks.Sample{
			{Stack: []*stacks.Location{work, mainLoc}, Count: 30, Pid: 42, Tid: 42, Comm: "app", Container: fixtureContainer},
			{Stack: []*stacks.Location{work, mainLoc}, Count: 10, Pid: 42, Tid: 43, Comm: "app", Container: fixtureContainer},
			{Stack: []*stacks.Location{kunsym, sysWrite, entry, write, mainLoc}, Count: 5, Pid: 42, Tid: 42, Comm: "app", Container: fixtureContainer},
			{Stack: []*stacks.Location{jit, write}, Count: 2, Pid: 42, Tid: 43, Comm: "app", Container: fixtureContainer, Truncated: true},
			{Stack: []*stacks.Location{sysWrite, entry}, Count: 1, Pid: 7, Tid: 7, Comm: "kworker/0:1 x"},
			{Stack: []*stacks.Location{mainLoc}, Count: 0, Pid: 42, Tid: 42, Comm: "app", Container: fixtureContainer},
		},
	}
}

// fixtureContainer is the container of the fixture's process 42.
const fixtureContainer = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"

// checkGolden compares got with testdata/exporters/name (-update rewrites it).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("..", "testdata", "exporters", name), got)
}

// goTool runs `go tool ARGS` (the pprof from the Go distribution is the
// oracle for our pprof output) and returns its standard output.
func goTool(t *testing.T, args ...string) []byte {
	t.Helper()
	goBin := testenv.RequireTool(t, "go")
	cmd := exec.Command(goBin, append([]string{"tool"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}
