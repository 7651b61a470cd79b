package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/sprof/sprof/collector/container"
	"github.com/sprof/sprof/internal/readall"
)

// image is one program run by one process: from its exec (or from when
// sprof first saw it) to its next exec or its exit. A pid reused by another
// process, or exec'ing another program, gets a new image.
type image struct {
	pid uint32
	// process numbers processes: images of one process (before and
	// after exec) share it, a reused pid gets a new one.
	process uint32
	maps    *mapSet
	// startTime is field 22 of /proc/PID/stat when the image was read
	// from /proc (0 when it came from the side band); a different value
	// later means the pid was reused.
	startTime uint64
	// refreshed is the sample time of the last /proc read, for the rate
	// limit.
	refreshed uint64
	// beforeExec is the mappings of the program that exec'd into this
	// one. Until exec returns to user space, a sample in the kernel still
	// carries the old program's user registers.
	beforeExec *mapSet
	// exited is the time of the exit record of the process's main
	// thread, 0 while it runs. The record comes before the dying task
	// unmaps its memory and closes its files (kernel 6.18 samples show
	// exit_mmap and __fput after it), and other threads may outlive the
	// main one, so the image keeps serving the pid's samples until the
	// pid is reused — a fork record, which precedes any sample of the
	// new process — or until no sample has used it for exitedGrace.
	exited uint64
	// lastSample is the time of the newest sample that used the image.
	lastSample uint64
	// container is the ID of the container the process runs in, "" for
	// none (stacks.Sample.Container). It is read from /proc/PID/cgroup
	// with the process's other /proc files, or at the image's first
	// sample when the side band announced the image (see settle), and
	// never again: processes do not change containers without an exec.
	container      string
	containerKnown bool
}

// exitedGrace is how long an exited process's image is kept after its exit
// or its last sample: unmapping a process of many gigabytes can take
// seconds.
const exitedGrace = 10 * uint64(time.Second)

// table is the process table: every live process's current image.
type table struct {
	procRoot string
	files    *files
	byPid    map[uint32]*image
	// follow, when not nil, limits tracking to these pids and their
	// descendants; nil tracks every process.
	follow      map[uint32]bool
	followForks bool
	// refreshEvery rate-limits rereading /proc/PID/maps for a process
	// whose samples fall outside its known mappings.
	refreshEvery uint64
	// failed holds the sample time of the last failed /proc read per pid.
	failed      map[uint32]uint64
	nextProcess uint32
	// none is the empty mapSet of processes sprof could not read.
	none    *mapSet
	nextSet uint32
	// exitedPids are the pids whose image has exited, for prune.
	exitedPids []uint32
	// buf is read's buffer for /proc files, kept between reads.
	buf []byte
}

func newTable(procRoot string, pids []uint32, followForks bool, refreshEvery uint64) *table {
	t := &table{
		procRoot:     procRoot,
		files:        newFiles(procRoot),
		byPid:        map[uint32]*image{},
		failed:       map[uint32]uint64{},
		refreshEvery: refreshEvery,
		followForks:  followForks,
		none:         &mapSet{frozen: true},
	}
	if len(pids) > 0 {
		t.follow = map[uint32]bool{}
		for _, p := range pids {
			t.follow[p] = true
		}
	}
	return t
}

func (t *table) tracked(pid uint32) bool { return t.follow == nil || t.follow[pid] }

func (t *table) newImage(pid uint32, set *mapSet) *image {
	t.nextProcess++
	img := &image{process: t.nextProcess, pid: pid, maps: set}
	t.byPid[pid] = img
	return img
}

func (t *table) newSet(maps []mapping, anon []codeRange) *mapSet {
	t.nextSet++
	return &mapSet{id: t.nextSet, maps: maps, anon: anon}
}

// scan reads every tracked process now in /proc, for processes that
// started before the side band was open.
func (t *table) scan() error {
	if t.follow != nil {
		for pid, ok := range t.follow {
			if ok {
				t.load(pid, 0)
			}
		}
		return nil
	}
	ents, err := os.ReadDir(t.procRoot)
	if err != nil {
		return fmt.Errorf("scan processes: %w", err)
	}
	for _, e := range ents {
		if pid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			t.load(uint32(pid), 0)
		}
	}
	return nil
}

// load reads pid's mappings from /proc into a new image. now is the sample
// time that asked for it (0 at start).
func (t *table) load(pid uint32, now uint64) (*image, error) {
	start, maps, anon, err := t.read(pid)
	if err != nil {
		t.failed[pid] = now
		return nil, err
	}
	img := t.newImage(pid, t.newSet(maps, anon))
	img.startTime, img.refreshed = start, now
	t.readContainer(img)
	return img, nil
}

// readContainer reads the container of img's process from /proc. A
// process gone by now keeps what img inherited.
func (t *table) readContainer(img *image) {
	img.containerKnown = true
	if id, err := container.OfProcess(t.procRoot, img.pid); err == nil {
		img.container = id
	}
}

// settle completes, at the first sample of an image that the side band
// announced, what only /proc can tell: its container. An exec is where a
// runtime's process enters its container (runc moves its child into the
// container's cgroup, then execs the container's program), so the
// container an exec'd image inherited may be out of date; a process that
// has exited since keeps the inherited one, as /proc may show a reused
// pid by now.
func (t *table) settle(img *image) {
	if img.containerKnown {
		return
	}
	if img.exited != 0 {
		img.containerKnown = true
		return
	}
	t.readContainer(img)
}

// read returns pid's start time and executable mappings from /proc: those
// of files and those of none.
func (t *table) read(pid uint32) (uint64, []mapping, []codeRange, error) {
	dir := filepath.Join(t.procRoot, strconv.FormatUint(uint64(pid), 10))
	stat, err := t.readProc(filepath.Join(dir, "stat"))
	if err != nil {
		return 0, nil, nil, err
	}
	start, err := parseStartTime(stat)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s/stat: %w", dir, err)
	}
	b, err := t.readProc(filepath.Join(dir, "maps"))
	if err != nil {
		return 0, nil, nil, err
	}
	ents, err := parseMaps(b)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s/maps: %w", dir, err)
	}
	maps := make([]mapping, 0, len(ents))
	var anon []codeRange
	for i := range ents {
		e := &ents[i]
		if !e.symbolizable() {
			anon = append(anon, codeRange{e.start, e.limit})
			continue
		}
		maps = append(maps, mapping{start: e.start, limit: e.limit, offset: e.offset, bin: t.files.fromMaps(pid, e)})
	}
	return start, maps, anon, nil
}

// maxProcFile bounds a /proc file read: a process with a million
// mappings has 100 MB of maps.
const maxProcFile = 256 << 20

// readProc reads the /proc file p into t's buffer, valid until the next
// call. /proc files have no size to read by, and os.ReadFile grows a
// buffer from 512 bytes for each: for the agent on a busy host, a fifth
// of its allocations. A buffer grown past 1 MiB (a huge process's maps)
// is not kept.
func (t *table) readProc(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cap(t.buf) > 1<<20 {
		t.buf = nil
	}
	b, err := readall.Append(t.buf[:0], f, maxProcFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	t.buf = b
	return b, nil
}

// parseStartTime returns field 22 (starttime) of /proc/PID/stat. The comm
// field may hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' after comm")
	}
	fields := bytes.Fields(stat[i+1:])
	// Fields after comm start at field 3 (state); starttime is field 22.
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("%d fields after comm, starttime is field 22", len(fields))
	}
	v, err := strconv.ParseUint(string(fields[idx]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("starttime %q: %w", fields[idx], err)
	}
	return v, nil
}

// forSample returns the image pid runs now, reading /proc for a pid the
// side band never told about (rate-limited, since it may be gone).
func (t *table) forSample(pid uint32, now uint64) *image {
	if img := t.byPid[pid]; img != nil {
		img.lastSample = now
		return img
	}
	if last, ok := t.failed[pid]; ok && now-last < t.refreshEvery {
		return nil
	}
	img, _ := t.load(pid, now)
	return img
}

// refresh rereads img's mappings from /proc because a sample hit an
// address in none of them, at most once per refreshEvery. It returns the
// image to use: img with a new mapSet, a new image if the pid now runs
// another process, or img unchanged.
//
// A process whose memory is gone — exiting, or a zombie, or a process
// whose main thread exited before the others — shows no mappings at all in
// /proc. That says nothing of the mappings its samples were taken under, so
// it never replaces them: the sample that asked is most likely one of its
// last, and the mappings sprof has are right for it.
func (t *table) refresh(img *image, now uint64) *image {
	if img.exited != 0 || img.refreshed != 0 && now-img.refreshed < t.refreshEvery {
		return img
	}
	img.refreshed = now
	start, maps, anon, err := t.read(img.pid)
	if err != nil {
		return img
	}
	if img.startTime != 0 && start != img.startTime {
		n := t.newImage(img.pid, t.newSet(maps, anon))
		n.startTime, n.refreshed = start, now
		t.readContainer(n)
		return n
	}
	img.startTime = start
	if len(maps) > 0 {
		img.maps = t.newSet(maps, anon)
	}
	return img
}

// writable returns img's mapSet ready to change, copying it when samples
// refer to it.
func (t *table) writable(img *image) *mapSet {
	if img.maps.frozen {
		img.maps = t.newSet(slices.Clone(img.maps.maps), slices.Clone(img.maps.anon))
	}
	return img.maps
}

// fork starts tracking a child process, which begins with its parent's
// mappings. Threads (pid == ppid) change nothing.
func (t *table) fork(pid, ppid uint32) {
	if pid == ppid {
		return
	}
	if t.follow != nil {
		if !t.followForks || !t.follow[ppid] {
			return
		}
		t.follow[pid] = true
	}
	parent := t.byPid[ppid]
	set := t.newSet(nil, nil)
	if parent != nil {
		parent.maps.frozen = true
		set = parent.maps
	}
	img := t.newImage(pid, set)
	if parent != nil { // a child starts in its parent's cgroup
		img.container, img.containerKnown = parent.container, parent.containerKnown
	}
}

// exec starts a new image for pid, empty until its mmap records arrive.
func (t *table) exec(pid uint32) {
	if !t.tracked(pid) {
		return
	}
	prev := t.byPid[pid]
	img := t.newImage(pid, t.newSet(nil, nil))
	if prev != nil {
		prev.maps.frozen = true
		img.beforeExec, img.process = prev.maps, prev.process
		img.container = prev.container // until settle reads it
	}
}

// mmap adds an executable mapping to the current image of pid, a tracked
// process: m, or with anon set a mapping of no file over m's range.
func (t *table) mmap(pid uint32, m mapping, anon bool) {
	img := t.byPid[pid]
	if img == nil {
		img = t.newImage(pid, t.newSet(nil, nil))
	}
	if anon {
		t.writable(img).insertAnon(codeRange{m.start, m.limit})
		return
	}
	t.writable(img).insert(m)
}

// exit marks the image of a process whose main thread exited at time
// now; prune forgets it later.
func (t *table) exit(pid, tid uint32, now uint64) {
	if pid != tid {
		return
	}
	delete(t.failed, pid)
	if img := t.byPid[pid]; img != nil && img.exited == 0 {
		img.exited = now
		t.exitedPids = append(t.exitedPids, pid)
	}
}

// prune forgets the exited processes that no sample used for exitedGrace
// before time now. Their images live on in the stacks that refer to them.
func (t *table) prune(now uint64) {
	keep := t.exitedPids[:0]
	for _, pid := range t.exitedPids {
		img := t.byPid[pid]
		switch {
		case img == nil || img.exited == 0:
			// The pid was reused: it has a running image now.
		case max(img.exited, img.lastSample)+exitedGrace > now:
			keep = append(keep, pid)
		default:
			delete(t.byPid, pid)
			if t.follow != nil {
				delete(t.follow, pid)
			}
		}
	}
	t.exitedPids = keep
}

// setFor returns the mappings a sample's user stack refers to: the
// current ones, except for a sample taken in the kernel during exec, whose
// user registers still point into the program that called exec.
func (img *image) setFor(user, kernel []uint64) *mapSet {
	if img.beforeExec != nil && len(kernel) > 0 && len(user) > 0 &&
		img.maps.find(user[0]) == nil && img.beforeExec.find(user[0]) != nil {
		return img.beforeExec
	}
	return img.maps
}
