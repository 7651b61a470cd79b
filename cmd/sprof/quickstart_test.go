package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
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
		env = append(env, v+"="+goEnv(t, v))
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
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	runQuickStart(t, repo, work, quickStartEnv(t, home), nil)
}

// TestReadmeQuickStartSudoUser runs the quick start as TestReadmeQuickStart
// does, as a user who has sudo rights and is not root: a user the test
// creates with a home of its own and a NOPASSWD sudoers entry, and removes
// at the end. It works from a clone the user owns (git refuses
// repositories of other users) and builds with Go caches of its own, kept
// between runs in quickStartUserCache so that only the first run builds
// cold; its modules come from root's module cache, as the user would
// download them.
func TestReadmeQuickStartSudoUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sprof and records for 10 s")
	}
	testenv.RequireRoot(t)
	git := testenv.RequireTool(t, "git")
	testenv.RequireTool(t, "sudo")
	useradd, userdel := testenv.RequireTool(t, "useradd"), testenv.RequireTool(t, "userdel")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("", "sprof-quickstart-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	home := filepath.Join(work, "home")

	// The user, and its sudo rights.
	name := fmt.Sprintf("sprof-qs-%d", os.Getpid())
	if out, err := exec.Command(useradd, "--home-dir", home, "--create-home", "--shell", "/bin/sh", "--user-group", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(userdel, name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v\n%s", name, err, out)
		}
	})
	sudoers := filepath.Join("/etc/sudoers.d", name)
	if err := os.WriteFile(sudoers, []byte(name+" ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sudoers) })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// The user's clone source, caches and working directory.
	source := filepath.Join(work, "sprof.git")
	if out, err := exec.Command(git, "clone", "--quiet", "--bare", repo, source).CombinedOutput(); err != nil {
		t.Fatalf("git clone --bare: %v\n%s", err, out)
	}
	goBin := testenv.RequireTool(t, "go")
	cache := quickStartUserCache
	fill := exec.Command(goBin, "list", "-deps", "./cmd/sprof")
	fill.Dir = repo
	fill.Env = append(os.Environ(), "GOMODCACHE="+filepath.Join(cache, "mod"), "GOFLAGS=-modcacherw",
		"GOPROXY=file://"+filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download"), "GOSUMDB=off")
	if out, err := fill.CombinedOutput(); err != nil {
		t.Fatalf("filling the user's module cache from root's: %v\n%s", err, out)
	}
	for _, dir := range []string{work, cache} {
		if err := chownAll(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{
		"PATH=" + filepath.Dir(goBin) + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home, "USER=" + name, "LOGNAME=" + name,
		"LANG=C.UTF-8",
		"BROWSER=true",
		"GOCACHE=" + filepath.Join(cache, "build"),
		"GOMODCACHE=" + filepath.Join(cache, "mod"),
		"GOPROXY=off",
	}
	runQuickStart(t, source, home, env, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)})
}

// quickStartUserCache holds TestReadmeQuickStartSudoUser's Go caches
// between runs: a cold build of sprof takes minutes.
const quickStartUserCache = "/var/cache/sprof-test/quickstart-user"

// goEnv returns `go env NAME`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(testenv.RequireTool(t, "go"), "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// chownAll gives dir and everything under it to uid and gid.
func chownAll(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// runQuickStart runs README.md's quick start in dir with env, as cred's
// user (nil: as this process's), cloning repo for the README's
// placeholder, and checks what it makes: sprof check's verdict, the
// recording, pprof's flame graph of it, and a static binary.
func runQuickStart(t *testing.T, repo, dir string, env []string, cred *syscall.Credential) {
	t.Helper()
	fileTool := testenv.RequireTool(t, "file")
	lines := quickStart(t, "../../README.md")
	script := strings.Join(lines, "\n") + "\n"
	if strings.Count(script, repoPlaceholder) != 1 {
		t.Fatalf("the quick start names %q %d times, want once:\n%s", repoPlaceholder, strings.Count(script, repoPlaceholder), script)
	}
	script = strings.Replace(script, repoPlaceholder, repo, 1)

	// sh reads the script from stdin and runs each line as it reads it,
	// as a user pasting the lines would; -x echoes each into the log.
	sh := exec.Command("/bin/sh", "-x")
	sh.Dir = dir
	sh.Env = env
	sh.Stdin = strings.NewReader(script)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
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

	bin := filepath.Join(dir, "sprof", "sprof")
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
