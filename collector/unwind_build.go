package collector

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sprof/sprof/unwind"
)

// Asking for unwind tables.
//
// The drain asks unwind.Builder for a binary's table the first time a
// sample needs it and installs it at a later drain; the samples that need
// it meanwhile are held back (unwind_hold.go). A table is built only from
// at most unwind.MaxBuildInput bytes of CFI, and a table larger than the
// cache budget (Options.UnwindCacheBytes) is not kept: a binary over
// either bound has no table, and --debug-unwind names the reason.

// requestBuild asks for in's table, built from the file pid maps at m.
func (u *unwinder) requestBuild(in *unwindInfo, pid uint32, m *mapping) {
	if in.cfiBytes > unwind.MaxBuildInput {
		u.noTable(in, fmt.Errorf("%s: %d MiB of CFI, more than the %d MiB a table is built from", in.name, in.cfiBytes>>20, unwind.MaxBuildInput>>20))
		return
	}
	f := u.openFile(pid, m)
	if f == nil {
		u.noTable(in, fmt.Errorf("%s: cannot open", m.bin.name))
		return
	}
	in.building = true
	u.builds.Submit(&unwind.Job[*unwindInfo]{Key: in, File: f, Name: m.bin.name, HasSFrame: in.hasSFrame, Cost: in.cfiBytes, BuildID: in.buildID})
}

// openFile opens a descriptor of m's file for the builder: the file as
// pid maps it, else a copy of the descriptor pinned for symbolization
// (the process may be gone).
func (u *unwinder) openFile(pid uint32, m *mapping) *os.File {
	if f := u.files.open(pid, m); f != nil {
		return f
	}
	if p := m.bin.pinned; p != nil {
		if fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			return os.NewFile(uintptr(fd), m.bin.name)
		}
	}
	return nil
}

// noTable records that in has no table, and why.
func (u *unwinder) noTable(in *unwindInfo, err error) {
	in.built, in.err = true, err
	u.stats.TableErrors++
}

// install takes the tables the builder finished into the cache.
func (u *unwinder) install() {
	for _, j := range u.builds.Take() {
		in := j.Key
		in.building = false
		u.stats.BuildTime += j.Took
		if j.Stored {
			u.stats.TablesStored++
		}
		if j.StoreErr != nil {
			u.storeError(j.StoreErr)
		}
		if j.SFrameErr != nil {
			u.stats.TableErrors++
		}
		if j.Err != nil {
			u.noTable(in, j.Err)
			u.kernelLoad(in, nil)
			continue
		}
		u.kernelLoad(in, j.Table)
		size := j.Table.MemSize()
		e, evicted := u.tables.Add(in, size)
		if e == nil {
			u.noTable(in, fmt.Errorf("%s: a table of %d MiB, more than the unwind cache's %d MiB", in.name, size>>20, u.tables.Budget()>>20))
			continue
		}
		in.built, in.table, in.kind, in.size, in.cached = true, j.Table, j.Kind, size, e
		// An evicted table is built again when a sample needs it.
		for _, old := range evicted {
			old.table, old.size, old.built, old.cached = nil, 0, false, nil
		}
		u.stats.Tables, u.stats.TableBytes, u.stats.Evicted = u.tables.Len(), u.tables.Bytes(), u.tables.Evicted()
	}
}
