package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sprof/sprof/internal/testenv"
)

// repoPlaceholder is how README.md's quick start names the repository.
const repoPlaceholder = "<this repository>"

// quickStart returns the lines of the first sh block under README.md's
// "## Quick start" heading.
func quickStart(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatalf("%s has no \"## Quick start\" section", readme)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the quick start has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("the quick start's sh block does not end")
	}
	return strings.Split(strings.TrimSuffix(block, "\n"), "\n")
}

// quickStartEnv is the environment of a fresh root login on this
// project's kind of machine: Go's bin directory in PATH, as Go's install
// instructions have it, and nothing else of this test's environment but
// Go's caches (so the build is not a cold one), and BROWSER=true, as on a
// server, where pprof finds no browser to open.
func quickStartEnv(t *testing.T, home string) []string {
	t.Helper()
	goBin := testenv.RequireTool(t, "go")
	env := []string{
		"PATH=" + filepath.Dir(goBin) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"BROWSER=true",
	}
	for _, v := range []string{"GOCACHE", "GOMODCACHE"} {
		out, err := exec.Command(goBin, "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	return env
}

// TestReadmeQuickStart runs README.md's quick start as written, line by
// line in one shell, as root in a clean environment: clone (this
// repository's committed HEAD), build, check, record, and pprof's web UI,
// which must serve the recorded profile's flame graph. It then holds the
// built binary to `file`: statically linked, as `sprof version` says.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sprof and records for 10 s")
	}
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "git")
	fileTool := testenv.RequireTool(t, "file")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	lines := quickStart(t, filepath.Join(repo, "README.md"))
	script := strings.Join(lines, "\n") + "\n"
	if strings.Count(script, repoPlaceholder) != 1 {
		t.Fatalf("the quick start names %q %d times, want once:\n%s", repoPlaceholder, strings.Count(script, repoPlaceholder), script)
	}
	script = strings.Replace(script, repoPlaceholder, repo, 1)

	work := t.TempDir()
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// sh reads the script from stdin and runs each line as it reads it,
	// as a user pasting the lines would; -x echoes each into the log.
	sh := exec.Command("/bin/sh", "-x")
	sh.Dir = work
	sh.Env = quickStartEnv(t, home)
	sh.Stdin = strings.NewReader(script)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	sh.Stdout, sh.Stderr = pw, pw
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sh.Wait(); pw.Close() }()
	t.Cleanup(func() {
		syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
		<-done
	})

	// Read the log until pprof serves its UI, the quick start's last step;
	// the shell ending first means a step failed.
	var log strings.Builder
	serving := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if _, url, ok := strings.Cut(sc.Text(), "Serving web UI on "); ok {
			serving = strings.TrimSpace(url)
			break
		}
	}
	go io.Copy(io.Discard, pr) // keep pprof's later output from blocking it
	t.Logf("quick start:\n%s", log.String())
	if serving == "" {
		t.Fatalf("the quick start ended before pprof served the profile: %v", <-done)
	}
	for _, want := range []string{"sprof can record here", "wrote cpu.pb.gz (pprof)"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the quick start's output lacks %q", want)
		}
	}
	resp, err := getWhenListening(serving+"/ui/flamegraph", done)
	if err != nil {
		t.Fatalf("pprof's web UI: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// pprof titles the page with the main binary and the sample type.
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), " cpu</title>") {
		t.Errorf("GET %s/ui/flamegraph: %s, %d bytes; want 200 and a page titled with sprof's sample type, cpu", serving, resp.Status, len(body))
	}

	bin := filepath.Join(work, "sprof", "sprof")
	out, err := exec.Command(fileTool, bin).Output()
	if err != nil || !strings.Contains(string(out), "statically linked") {
		t.Errorf("file %s: %s %v; want statically linked", bin, out, err)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), ", statically linked, ") {
		t.Errorf("sprof version: %s %v; want it to say statically linked", out, err)
	}
}

// getWhenListening GETs url once its server listens: pprof says where it
// serves before it opens the port. It gives up when the shell running the
// server ends (its exit status comes on exited, and is put back for the
// test's cleanup), or after a minute of refused connections.
func getWhenListening(url string, exited chan error) (*http.Response, error) {
	retry := time.NewTicker(50 * time.Millisecond)
	defer retry.Stop()
	giveUp := time.After(time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return resp, err
		}
		select {
		case <-retry.C:
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("the quick start ended (%v) before %s answered", err, url)
		case <-giveUp:
			return nil, err
		}
	}
}
