package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sprof/sprof/sframe"
)

// Keeping built tables on disk.
//
// Building the table of a large library costs a second of CPU on an idle
// core and about 100 MiB of transient heap for libLLVM, and much longer on
// a loaded host, where the builder's thread runs at nice 10: sprof
// measured 12 s before clang's tables were in the kernel during a 27 s
// compile, and a third of the compile's stacks ended at the first
// libLLVM frame. The same binary gives the same table every time, so a
// Store keeps each table, by the binary's build ID, in a directory (beside
// the GSYM files), and the next profiler run, or the agent after a
// restart, reads it in milliseconds.
//
// A stored table is the table encoded as an SFrame V3 section, which
// expresses every rule a built table holds (a table it cannot encode is
// not stored), in a file that names the sprof executable that built it:
// another sprof's tables are rebuilt, so that a fixed synthesizer never
// meets the tables of an older one. The files are not trusted: a CRC-32C
// over the whole file catches damage, the section is parsed as any SFrame
// section is (bounded, checked), and a file that fails is rebuilt and
// replaced.

// Store keeps built unwind tables in a directory. Its methods are safe
// for concurrent use; writes are atomic (a temporary file renamed).
type Store struct {
	dir      string
	producer string
}

// MaxStoredTable bounds a stored table file: a table is built from at
// most MaxBuildInput bytes of CFI, and its SFrame encoding is smaller than
// that CFI (libLLVM 22: 6.2 MiB of .eh_frame, a 7.0 MiB section).
const MaxStoredTable = 4 * MaxBuildInput

// OpenStore returns a Store over dir, made if missing (mode 0700: tables
// describe the code of the host's programs). producer names the sprof
// executable (e.g. its Go build ID): tables another producer stored are
// not used.
func OpenStore(dir, producer string) (*Store, error) {
	if producer == "" {
		return nil, errors.New("unwind table store: no producer")
	}
	if len(producer) > maxProducer {
		return nil, fmt.Errorf("unwind table store: producer %.32q... longer than %d bytes", producer, maxProducer)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("unwind table store: %w", err)
	}
	return &Store{dir: dir, producer: producer}, nil
}

// Dir returns the directory of s.
func (s *Store) Dir() string { return s.dir }

// path names the file of a binary's table (suffix "unwind") or of a form
// derived from it. hasSFrame is part of the name: the table of a binary
// with an .sframe section also depends on it.
func (s *Store) path(buildID string, hasSFrame bool, suffix string) (string, error) {
	if !validBuildID(buildID) {
		return "", fmt.Errorf("unwind table store: build ID %q is not lower-case hex", buildID)
	}
	kind := "eh"
	if hasSFrame {
		kind = "sf"
	}
	return filepath.Join(s.dir, buildID+"."+kind+"."+suffix), nil
}

func validBuildID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Load returns the table stored for the binary with buildID, and the
// method its rules count as; fs.ErrNotExist when none is stored or the
// stored one is another producer's, and a *StoredError when the file is
// damaged (the caller rebuilds and Saves over it).
func (s *Store) Load(buildID string, hasSFrame bool) (*sframe.Table, Method, error) {
	path, err := s.path(buildID, hasSFrame, "unwind")
	if err != nil {
		return nil, 0, err
	}
	data, err := readStored(path)
	if err != nil {
		return nil, 0, err
	}
	producer, t, kind, err := decodeStored(data)
	if err != nil {
		err.(*StoredError).Path = path
		return nil, 0, err
	}
	if producer != s.producer {
		return nil, 0, fs.ErrNotExist
	}
	return t, kind, nil
}

// Save stores t, built with method kind, as the table of the binary with
// buildID. A table SFrame cannot express is not stored (an error wrapping
// sframe.ErrUnsupported).
func (s *Store) Save(buildID string, hasSFrame bool, t *sframe.Table, kind Method) error {
	path, err := s.path(buildID, hasSFrame, "unwind")
	if err != nil {
		return err
	}
	data, err := encodeStored(s.producer, t, kind)
	if err != nil {
		return fmt.Errorf("unwind table store: %s: %w", path, err)
	}
	return s.write(path, data)
}

// Derived forms. A table's user may convert it into a form of its own,
// which costs more than reading it: the BPF walk's layout of libLLVM's
// table takes 50-60 ms to convert from a table that took 90-200 ms to
// read, while a new process's samples wait for it. SaveDerived keeps such
// a form beside the table, under a name of its user's (lower-case
// letters), in a file checked as a table's is (producer, checksum);
// LoadDerived returns its bytes, which the user parses as untrusted.

// SaveDerived stores data as the form name of the binary's table.
func (s *Store) SaveDerived(buildID string, hasSFrame bool, name string, data []byte) error {
	path, err := s.derivedPath(buildID, hasSFrame, name)
	if err != nil {
		return err
	}
	if len(data) > MaxStoredTable-storedHeader-len(s.producer) {
		return fmt.Errorf("unwind table store: %s: %d bytes, more than a file's %d", path, len(data), MaxStoredTable)
	}
	return s.write(path, encodeFile(derivedMagic, 0, 0, s.producer, data))
}

// LoadDerived returns the form name of the binary's table; fs.ErrNotExist
// when none is stored or the stored one is another producer's, and a
// *StoredError when the file is damaged.
func (s *Store) LoadDerived(buildID string, hasSFrame bool, name string) ([]byte, error) {
	path, err := s.derivedPath(buildID, hasSFrame, name)
	if err != nil {
		return nil, err
	}
	data, err := readStored(path)
	if err != nil {
		return nil, err
	}
	_, _, producer, payload, serr := decodeFile(data, derivedMagic)
	if serr != nil {
		serr.Path = path
		return nil, serr
	}
	if producer != s.producer {
		return nil, fs.ErrNotExist
	}
	return payload, nil
}

func (s *Store) derivedPath(buildID string, hasSFrame bool, name string) (string, error) {
	if name == "" || name == "unwind" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz") != "" {
		return "", fmt.Errorf("unwind table store: %q is no name for a derived form (lower-case letters, not unwind)", name)
	}
	return s.path(buildID, hasSFrame, name)
}

// readStored reads a stored file whole, refusing one larger than any
// sprof writes.
func readStored(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxStoredTable {
		return nil, &StoredError{Path: path, Field: "file size", Err: fmt.Errorf("%d bytes, more than %d", st.Size(), MaxStoredTable)}
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// write writes data as path, atomically: a temporary file renamed.
func (s *Store) write(path string, data []byte) error {
	tmp, err := os.CreateTemp(s.dir, ".tmp-*.unwind")
	if err != nil {
		return fmt.Errorf("unwind table store: %w", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("unwind table store: %w", err)
	}
	return nil
}

// The file: a header, the producer's name, the payload: the SFrame
// section of a table, or a derived form.
//
//	offset  size  field
//	0       8     magic "SPRFUNW1" (a table), "SPRFDRV1" (a derived form)
//	8       4     crc: CRC-32C (Castagnoli) of every byte after this field
//	12      1     method (Method); 0 in a derived form
//	13      1     producer length P
//	14      2     reserved, zero
//	16      8     addr: the section's address (Table.Addr); 0 in a derived form
//	24      4     payload length N
//	28      P     producer
//	28+P    N     the payload
const (
	storedMagic  = "SPRFUNW1"
	derivedMagic = "SPRFDRV1"
	storedHeader = 28
	maxProducer  = 255
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeStored(producer string, t *sframe.Table, kind Method) ([]byte, error) {
	if kind != MethodSFrame && kind != MethodEHFrame {
		return nil, fmt.Errorf("method %v is not a table's", kind)
	}
	section, err := t.Encode(sframe.Version3, t.Addr)
	if err != nil {
		return nil, err
	}
	return encodeFile(storedMagic, kind, t.Addr, producer, section), nil
}

func encodeFile(magic string, kind Method, addr uint64, producer string, payload []byte) []byte {
	out := make([]byte, storedHeader, storedHeader+len(producer)+len(payload))
	copy(out, magic)
	out[12], out[13] = byte(kind), byte(len(producer))
	binary.LittleEndian.PutUint64(out[16:], addr)
	binary.LittleEndian.PutUint32(out[24:], uint32(len(payload)))
	out = append(append(out, producer...), payload...)
	binary.LittleEndian.PutUint32(out[8:], crc32.Checksum(out[12:], castagnoli))
	return out
}

// StoredError says why a stored table file was not used: the field at
// Offset (or the check Field names) is wrong.
type StoredError struct {
	Path   string
	Offset int
	Field  string
	Err    error
}

func (e *StoredError) Error() string {
	return fmt.Sprintf("stored unwind table %s: offset %d, %s: %v", e.Path, e.Offset, e.Field, e.Err)
}

func (e *StoredError) Unwrap() error { return e.Err }

func decodeStored(data []byte) (producer string, t *sframe.Table, kind Method, err error) {
	kind, addr, producer, section, serr := decodeFile(data, storedMagic)
	if serr != nil {
		return "", nil, 0, serr
	}
	if kind != MethodSFrame && kind != MethodEHFrame {
		return "", nil, 0, &StoredError{Offset: 12, Field: "method", Err: fmt.Errorf("%d is not a table's", kind)}
	}
	off := len(data) - len(section)
	t, err = sframe.Parse(section, addr)
	if err != nil {
		return "", nil, 0, &StoredError{Offset: off, Field: "section", Err: err}
	}
	if t.Header.Version != sframe.Version3 {
		return "", nil, 0, &StoredError{Offset: off, Field: "section version", Err: fmt.Errorf("%v, want %v", t.Header.Version, sframe.Version3)}
	}
	return producer, t, kind, nil
}

// decodeFile checks a stored file's header and checksum and returns its
// fields.
func decodeFile(data []byte, magic string) (kind Method, addr uint64, producer string, payload []byte, err *StoredError) {
	bad := func(off int, field string, format string, args ...any) *StoredError {
		return &StoredError{Offset: off, Field: field, Err: fmt.Errorf(format, args...)}
	}
	if len(data) < storedHeader {
		return 0, 0, "", nil, bad(0, "header", "%d bytes, fewer than %d", len(data), storedHeader)
	}
	if !bytes.Equal(data[:8], []byte(magic)) {
		return 0, 0, "", nil, bad(0, "magic", "%q, want %q", data[:8], magic)
	}
	if got, want := crc32.Checksum(data[12:], castagnoli), binary.LittleEndian.Uint32(data[8:]); got != want {
		return 0, 0, "", nil, bad(8, "crc", "%#08x, the file's bytes give %#08x", want, got)
	}
	if data[14] != 0 || data[15] != 0 {
		return 0, 0, "", nil, bad(14, "reserved", "%#x, want 0", data[14:16])
	}
	plen, n := int(data[13]), binary.LittleEndian.Uint32(data[24:])
	if want := uint64(storedHeader+plen) + uint64(n); uint64(len(data)) != want {
		return 0, 0, "", nil, bad(24, "payload length", "%d: the file has %d bytes, the header says %d", n, len(data), want)
	}
	return Method(data[12]), binary.LittleEndian.Uint64(data[16:]), string(data[storedHeader : storedHeader+plen]), data[storedHeader+plen:], nil
}
