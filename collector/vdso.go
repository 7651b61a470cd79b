package collector

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/symbolize/buildid"
)

// The vDSO is the small shared object the kernel maps into every process
// (clock_gettime, gettimeofday, getcpu, time). It is no file: the side band
// reports its mapping as "[vdso]" with no build ID, and /proc/PID/map_files
// has nothing to open. Every native process of the running kernel maps the
// same image, sprof included, so sprof symbolizes all their [vdso] frames
// with a copy of its own, as perf does. 32-bit and x32 processes map another
// image (vdso32, vdsox32), always below 4 GiB; their [vdso] frames stay
// unnamed rather than named wrongly.

// maxVDSOSize bounds the image read: the vDSO is two to four pages.
const maxVDSOSize = 1 << 20

// lowestNativeVDSO is where a native process's vDSO may begin at the
// lowest: a compat process's address space ends at 4 GiB.
const lowestNativeVDSO = 1 << 32

// openVDSO copies sprof's own vDSO into a memory file, so that the
// symbolizer can open it by path like any binary, and returns it as the
// binaryFile every native [vdso] mapping shares, with its build ID, and the
// size of its mapping.
func openVDSO() (*binaryFile, uint64, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, 0, err
	}
	ents, err := parseMaps(maps)
	if err != nil {
		return nil, 0, fmt.Errorf("/proc/self/maps: %w", err)
	}
	i := 0
	for i < len(ents) && ents[i].path != vdsoName {
		i++
	}
	if i == len(ents) {
		return nil, 0, errors.New("sprof has no [vdso] mapping")
	}
	size := ents[i].limit - ents[i].start
	if size > maxVDSOSize {
		return nil, 0, fmt.Errorf("[vdso] mapping of %d bytes exceeds %d", size, maxVDSOSize)
	}
	img, err := readSelf(ents[i].start, size)
	if err != nil {
		return nil, 0, fmt.Errorf("read [vdso]: %w", err)
	}
	id, err := buildid.Read(bytes.NewReader(img))
	if err != nil && !errors.Is(err, buildid.ErrNotFound) {
		return nil, 0, fmt.Errorf("[vdso] build ID: %w", err)
	}
	fd, err := unix.MemfdCreate("sprof-vdso", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("memfd for [vdso]: %w", err)
	}
	f := os.NewFile(uintptr(fd), vdsoName)
	if _, err := f.Write(img); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("copy [vdso]: %w", err)
	}
	return &binaryFile{name: vdsoName, buildID: id, pinned: f, tried: true}, size, nil
}

// readSelf reads n bytes of sprof's own memory at addr, through
// /proc/self/mem rather than a pointer made from an integer.
func readSelf(addr, n uint64) ([]byte, error) {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	b := make([]byte, n)
	if _, err := mem.ReadAt(b, int64(addr)); err != nil {
		return nil, err
	}
	return b, nil
}
