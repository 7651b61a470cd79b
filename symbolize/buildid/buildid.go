package buildid

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotFound is returned for a valid ELF file that carries no GNU build ID.
var ErrNotFound = errors.New("no GNU build ID note")

// FormatError is a malformed ELF file: Offset is the byte offset of the
// field named by Field.
type FormatError struct {
	Offset int64
	Field  string
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("elf: %s at offset %#x: %s", e.Field, e.Offset, e.Msg)
}

const (
	// Bounds a hostile file cannot push us past.
	maxEntries  = 4096
	maxNoteSize = 64 << 10
	// A build ID is 20 bytes (SHA-1) in practice; 64 leaves room for
	// other hashes without letting a note claim megabytes.
	maxIDLen = 64

	ptNote        = 4
	shtNote       = 7
	ntGNUBuildID  = 3
	elfHeader64   = 64
	elfHeader32   = 52
	phdrSize64    = 56
	phdrSize32    = 32
	shdrSize64    = 64
	shdrSize32    = 40
	noteHeaderLen = 12
)

// File returns the GNU build ID of the ELF file at path as lower-case hex.
func File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, err := Read(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// Read returns the GNU build ID of the ELF file r as lower-case hex. It looks
// first in the PT_NOTE segments (present in every loaded binary, unlike
// section headers, which strip may drop), then in the SHT_NOTE sections: the
// Go linker's only PT_NOTE covers .note.go.buildid and leaves
// .note.gnu.build-id to a section no segment describes. It reads only the
// headers and the notes, so r may be a large binary behind a file handle.
func Read(r io.ReaderAt) (string, error) {
	h, err := readHeader(r)
	if err != nil {
		return "", err
	}
	phdrs := table{off: h.phoff, entsize: h.phentsize, num: h.phnum, minsize: phdrSize32,
		entsizeAt: h.phentsizeAt, numAt: h.phnumAt, field: "e_ph", what: "program header", noteType: ptNote}
	shdrs := table{off: h.shoff, entsize: h.shentsize, num: h.shnum, minsize: shdrSize32,
		entsizeAt: h.shentsizeAt, numAt: h.shnumAt, field: "e_sh", what: "section header", noteType: shtNote}
	if h.is64 {
		phdrs.minsize, shdrs.minsize = phdrSize64, shdrSize64
	}
	for _, t := range []table{phdrs, shdrs} {
		id, err := t.scan(r, h)
		if err != nil || id != "" {
			return id, err
		}
	}
	return "", ErrNotFound
}

// header is the part of the ELF header that locates the notes.
type header struct {
	bo                   binary.ByteOrder
	is64                 bool
	phoff, shoff         uint64
	phentsize, shentsize uint16
	phnum, shnum         uint16
	// Field offsets in the ELF header, for errors.
	phentsizeAt, phnumAt, shentsizeAt, shnumAt int64
}

func readHeader(r io.ReaderAt) (*header, error) {
	var ident [elfHeader64]byte
	n, err := r.ReadAt(ident[:], 0)
	if n < 20 {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read ELF header: %w", err)
	}
	if string(ident[:4]) != "\x7fELF" {
		return nil, &FormatError{0, "e_ident[EI_MAG]", "not an ELF file"}
	}
	h := &header{}
	switch ident[5] {
	case 1:
		h.bo = binary.LittleEndian
	case 2:
		h.bo = binary.BigEndian
	default:
		return nil, &FormatError{5, "e_ident[EI_DATA]", fmt.Sprintf("unknown byte order %d", ident[5])}
	}
	bo := h.bo
	switch ident[4] {
	case 1:
		if n < elfHeader32 {
			return nil, &FormatError{int64(n), "ELF header", "truncated"}
		}
		h.phoff, h.shoff = uint64(bo.Uint32(ident[28:])), uint64(bo.Uint32(ident[32:]))
		h.phentsizeAt, h.phnumAt, h.shentsizeAt, h.shnumAt = 42, 44, 46, 48
	case 2:
		if n < elfHeader64 {
			return nil, &FormatError{int64(n), "ELF header", "truncated"}
		}
		h.is64 = true
		h.phoff, h.shoff = bo.Uint64(ident[32:]), bo.Uint64(ident[40:])
		h.phentsizeAt, h.phnumAt, h.shentsizeAt, h.shnumAt = 54, 56, 58, 60
	default:
		return nil, &FormatError{4, "e_ident[EI_CLASS]", fmt.Sprintf("unknown class %d", ident[4])}
	}
	h.phentsize, h.phnum = bo.Uint16(ident[h.phentsizeAt:]), bo.Uint16(ident[h.phnumAt:])
	h.shentsize, h.shnum = bo.Uint16(ident[h.shentsizeAt:]), bo.Uint16(ident[h.shnumAt:])
	return h, nil
}

// table is the program or the section header table, each of whose entries
// of type noteType locates a run of notes.
type table struct {
	off              uint64
	entsize, num     uint16
	minsize          uint16 // size of one entry's fields
	entsizeAt, numAt int64  // offsets of e_Xentsize and e_Xnum in the ELF header
	field            string // "e_ph" or "e_sh", the prefix of the ELF header fields
	what             string
	noteType         uint32
}

// scan returns the GNU build ID in the notes t's entries locate, or "" when
// there is none. An e_shnum of 0 (no section headers, or more than 0xff00 of
// them, which no binary with a build ID note worth reading has) scans nothing.
func (t table) scan(r io.ReaderAt, h *header) (string, error) {
	if t.num == 0 {
		return "", nil
	}
	if t.entsize < t.minsize {
		return "", &FormatError{t.entsizeAt, t.field + "entsize", fmt.Sprintf("%d is smaller than a %s", t.entsize, t.what)}
	}
	if t.num > maxEntries {
		return "", &FormatError{t.numAt, t.field + "num", fmt.Sprintf("%d entries exceed the limit of %d", t.num, maxEntries)}
	}
	e := make([]byte, t.minsize)
	for i := range uint64(t.num) {
		off := t.off + i*uint64(t.entsize)
		if off > 1<<62 {
			return "", &FormatError{int64(t.off), t.field + "off", "out of range"}
		}
		if _, err := r.ReadAt(e, int64(off)); err != nil {
			return "", &FormatError{int64(off), t.what, err.Error()}
		}
		var typ uint32
		var noff, nsize uint64
		var sizeField string
		switch {
		case t.noteType == ptNote && h.is64:
			typ, noff, nsize, sizeField = h.bo.Uint32(e), h.bo.Uint64(e[8:]), h.bo.Uint64(e[32:]), "p_filesz"
		case t.noteType == ptNote:
			typ, noff, nsize, sizeField = h.bo.Uint32(e), uint64(h.bo.Uint32(e[4:])), uint64(h.bo.Uint32(e[16:])), "p_filesz"
		case h.is64:
			typ, noff, nsize, sizeField = h.bo.Uint32(e[4:]), h.bo.Uint64(e[24:]), h.bo.Uint64(e[32:]), "sh_size"
		default:
			typ, noff, nsize, sizeField = h.bo.Uint32(e[4:]), uint64(h.bo.Uint32(e[16:])), uint64(h.bo.Uint32(e[20:])), "sh_size"
		}
		if typ != t.noteType || nsize == 0 {
			continue
		}
		if nsize > maxNoteSize || noff > 1<<62 {
			return "", &FormatError{int64(off), sizeField, fmt.Sprintf("notes of %d bytes at %#x are out of bounds", nsize, noff)}
		}
		notes := make([]byte, nsize)
		if _, err := r.ReadAt(notes, int64(noff)); err != nil {
			return "", &FormatError{int64(noff), "notes of " + t.what, err.Error()}
		}
		id, err := findNote(notes, int64(noff), h.bo)
		if err != nil || id != "" {
			return id, err
		}
	}
	return "", nil
}

// findNote walks the notes of one segment and returns the GNU build ID, or ""
// when the segment has none. Note names and descriptors are padded to 4 bytes.
func findNote(b []byte, base int64, bo binary.ByteOrder) (string, error) {
	for off := 0; len(b)-off >= noteHeaderLen; {
		namesz, descsz, typ := bo.Uint32(b[off:]), bo.Uint32(b[off+4:]), bo.Uint32(b[off+8:])
		name := off + noteHeaderLen
		desc := name + align4(int(min(namesz, maxNoteSize+1)))
		end := desc + align4(int(min(descsz, maxNoteSize+1)))
		if uint64(namesz) > uint64(len(b)) || uint64(descsz) > uint64(len(b)) || end > len(b)+3 || desc+int(descsz) > len(b) {
			return "", &FormatError{base + int64(off), "note n_namesz/n_descsz", "note runs past the end of its segment"}
		}
		if typ == ntGNUBuildID && namesz == 4 && string(b[name:name+4]) == "GNU\x00" {
			if descsz == 0 || descsz > maxIDLen {
				return "", &FormatError{base + int64(off) + 4, "build ID n_descsz", fmt.Sprintf("length %d is not 1..%d", descsz, maxIDLen)}
			}
			return hex.EncodeToString(b[desc : desc+int(descsz)]), nil
		}
		off = end
	}
	return "", nil
}

func align4(n int) int { return (n + 3) &^ 3 }
