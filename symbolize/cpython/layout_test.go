package cpython

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprof/sprof/internal/testenv"
)

// interpreterDWARF lists interpreter files with DWARF on this machine, by
// version: Debian's python3.11 through python3.11-dbg's debug file, and
// pyenv's shared builds (-g by default) where pyenv is installed.
func interpreterDWARF(t *testing.T) map[Version][]string {
	t.Helper()
	found := map[Version][]string{}
	if debug := debianDebugFile(t, "/usr/bin/python3.11"); debug != "" {
		found[Version{3, 11}] = append(found[Version{3, 11}], debug)
	}
	libs, _ := filepath.Glob("/root/.pyenv/versions/3.*/lib/libpython3.*.so.1.0")
	for _, lib := range libs {
		if v, ok := Interpreter(lib); ok {
			found[v] = append(found[v], lib)
		}
	}
	return found
}

// debianDebugFile returns the separate debug file of binary, by its
// build ID, "" when there is none.
func debianDebugFile(t *testing.T, binary string) string {
	f, err := elf.Open(binary)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	data, err := s.Data()
	if err != nil || len(data) < 16+2 {
		return ""
	}
	id := fmt.Sprintf("%x", data[16:])
	path := fmt.Sprintf("/usr/lib/debug/.build-id/%s/%s.debug", id[:2], id[2:])
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// structs indexes the DWARF structure types of a file by name, typedef
// names included (CPython's PyASCIIObject is an anonymous struct).
type structs map[string]*dwarf.StructType

func readStructs(t *testing.T, path string) structs {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	want := map[string]bool{"pyruntimestate": true, "pyinterpreters": true, "_is": true, "pythreads": true,
		"_ts": true, "_PyCFrame": true, "_PyInterpreterFrame": true, "_frame": true, "PyCodeObject": true,
		"PyASCIIObject": true, "PyCompactUnicodeObject": true, "PyBytesObject": true, "PyVarObject": true,
		"PyObject": true, "_object": true}
	out := structs{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType && e.Tag != dwarf.TagTypedef {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if !want[name] || out[name] != nil {
			continue
		}
		typ, err := d.Type(e.Offset)
		if err != nil {
			continue
		}
		if td, ok := typ.(*dwarf.TypedefType); ok {
			typ = td.Type
		}
		if st, ok := typ.(*dwarf.StructType); ok && !st.Incomplete && len(st.Field) > 0 {
			out[name] = st
		}
	}
	return out
}

// offset is the offset of the field at path in structure name, or
// NoField when the structure has no such field.
func (s structs) offset(t *testing.T, name string, path ...string) uint64 {
	t.Helper()
	st := s[name]
	if st == nil {
		t.Fatalf("no structure %s in DWARF", name)
	}
	var off uint64
	for i, field := range path {
		var next *dwarf.StructField
		for _, f := range st.Field {
			if f.Name == field {
				next = f
			}
		}
		if next == nil {
			return NoField
		}
		off += uint64(next.ByteOffset)
		if i < len(path)-1 {
			typ := next.Type
			if td, ok := typ.(*dwarf.TypedefType); ok {
				typ = td.Type
			}
			st = typ.(*dwarf.StructType)
		}
	}
	return off
}

// fromDWARF is the Layout the DWARF of an interpreter of version v gives.
func fromDWARF(t *testing.T, s structs, v Version) Layout {
	lines := "co_linetable"
	if v.Minor < 10 {
		lines = "co_lnotab"
	}
	l := Layout{
		RuntimeInterpretersHead: s.offset(t, "pyruntimestate", "interpreters", "head"),
		ThreadNext:              s.offset(t, "_ts", "next"),
		CodeFilename:            s.offset(t, "PyCodeObject", "co_filename"),
		CodeName:                s.offset(t, "PyCodeObject", "co_name"),
		CodeQualname:            s.offset(t, "PyCodeObject", "co_qualname"),
		CodeLinetable:           s.offset(t, "PyCodeObject", lines),
		CodeFirstLineno:         s.offset(t, "PyCodeObject", "co_firstlineno"),
		CodeAdaptive:            s.offset(t, "PyCodeObject", "co_code_adaptive"),
		CodeCode:                s.offset(t, "PyCodeObject", "co_code"),
		ObType:                  s.offset(t, "PyVarObject", "ob_base", "ob_type"),
		UnicodeState:            s.offset(t, "PyASCIIObject", "state"),
		UnicodeLength:           s.offset(t, "PyASCIIObject", "length"),
		ASCIISize:               uint64(s["PyASCIIObject"].ByteSize),
		CompactSize:             uint64(s["PyCompactUnicodeObject"].ByteSize),
		BytesSize:               s.offset(t, "PyBytesObject", "ob_base", "ob_size"),
		BytesData:               s.offset(t, "PyBytesObject", "ob_sval"),
	}
	if v.Minor < 11 {
		// PyFrameObjects (struct _frame); threads named by pthread_t.
		if s.offset(t, "_ts", "native_thread_id") != NoField {
			t.Errorf("PyThreadState of %v has a native_thread_id: the layout need not go through pthread_t", v)
		}
		l.InterpThreadsHead = s.offset(t, "_is", "tstate_head")
		l.ThreadNativeID, l.ThreadPthread = s.offset(t, "_ts", "thread_id"), true
		l.ThreadFrame, l.CFrameCurrentFrame = s.offset(t, "_ts", "frame"), NoField
		l.FramePrevious = s.offset(t, "_frame", "f_back")
		l.FrameCode = s.offset(t, "_frame", "f_code")
		l.FrameInstr = s.offset(t, "_frame", "f_lasti")
		l.FrameOwner, l.FrameIsEntry = NoField, NoField
		// f_lasti counts bytes in 3.9 and code units (_Py_CODEUNIT, 2
		// bytes) in 3.10: the unit is no field; the line tests check it.
		l.FrameLastiUnit = 1
		if v.Minor >= 10 {
			l.FrameLastiUnit = 2
		}
		return l
	}
	frameCode, instr, thread, cframe := "f_executable", "instr_ptr", "current_frame", NoField
	if v.Minor < 13 {
		frameCode, instr, thread, cframe = "f_code", "prev_instr", "cframe", s.offset(t, "_PyCFrame", "current_frame")
	}
	l.InterpThreadsHead = s.offset(t, "_is", "threads", "head")
	l.ThreadNativeID = s.offset(t, "_ts", "native_thread_id")
	l.ThreadFrame, l.CFrameCurrentFrame = s.offset(t, "_ts", thread), cframe
	l.FramePrevious = s.offset(t, "_PyInterpreterFrame", "previous")
	l.FrameCode = s.offset(t, "_PyInterpreterFrame", frameCode)
	l.FrameInstr = s.offset(t, "_PyInterpreterFrame", instr)
	l.FrameOwner = s.offset(t, "_PyInterpreterFrame", "owner")
	l.FrameIsEntry = s.offset(t, "_PyInterpreterFrame", "is_entry")
	// The owner of C-stack shim frames is an enum constant, not in the
	// structures; it is checked by the live tests.
	return l
}

// TestLayoutsMatchDWARF checks the layout table, and the reading of 3.13's
// _Py_DebugOffsets, against the DWARF of the interpreters installed here.
func TestLayoutsMatchDWARF(t *testing.T) {
	found := interpreterDWARF(t)
	if len(found[Version{3, 11}]) == 0 {
		testenv.Unavailable(t, "no python3.11 with DWARF: apt-get install python3.11-dbg (scripts/install-test-deps.sh)")
	}
	for v, paths := range found {
		if v.Minor < 9 || v.Minor > 13 {
			continue // no layout: Detect says so (TestDetectUnsupported)
		}
		for _, path := range paths {
			t.Run(v.String()+"/"+filepath.Base(path), func(t *testing.T) {
				var got Layout
				var err error
				if v.Minor >= 13 {
					got, err = fileDebugOffsets(path, v)
				} else {
					got, err = tableLayout(v)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := fromDWARF(t, readStructs(t, path), v)
				want.OwnedByCStack = got.OwnedByCStack
				if got != want {
					t.Errorf("layout of %v:\n got %+v\nwant %+v (DWARF)", v, got, want)
				}
			})
		}
	}
}

// fileDebugOffsets reads the _Py_DebugOffsets that _PyRuntime starts with
// from its initial value in the file's .data: CPython initialises it
// statically.
func fileDebugOffsets(path string, v Version) (Layout, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Layout{}, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return Layout{}, err
	}
	for _, s := range syms {
		if s.Name != symRuntime || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		raw := make([]byte, DebugOffsetsSize)
		if _, err := sec.ReadAt(raw, int64(s.Value-sec.Addr)); err != nil {
			return Layout{}, err
		}
		return parseDebugOffsets(raw, v, binary.LittleEndian)
	}
	return Layout{}, fmt.Errorf("%s: no %s", path, symRuntime)
}
