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
	maxPhnum    = 4096
	maxNoteSize = 64 << 10
	// A build ID is 20 bytes (SHA-1) in practice; 64 leaves room for
	// other hashes without letting a note claim megabytes.
	maxIDLen = 64

	ptNote        = 4
	ntGNUBuildID  = 3
	elfHeader64   = 64
	elfHeader32   = 52
	phdrSize64    = 56
	phdrSize32    = 32
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

// Read returns the GNU build ID of the ELF file r as lower-case hex, found in
// its PT_NOTE segments (present in every loaded binary, unlike section
// headers, which strip may drop).
func Read(r io.ReaderAt) (string, error) {
	var ident [elfHeader64]byte
	n, err := r.ReadAt(ident[:], 0)
	if n < 20 {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", fmt.Errorf("read ELF header: %w", err)
	}
	if string(ident[:4]) != "\x7fELF" {
		return "", &FormatError{0, "e_ident[EI_MAG]", "not an ELF file"}
	}
	var bo binary.ByteOrder
	switch ident[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return "", &FormatError{5, "e_ident[EI_DATA]", fmt.Sprintf("unknown byte order %d", ident[5])}
	}
	var phoff uint64
	var phentsize, phnum uint16
	var is64 bool
	switch ident[4] {
	case 1:
		if n < elfHeader32 {
			return "", &FormatError{int64(n), "ELF header", "truncated"}
		}
		phoff = uint64(bo.Uint32(ident[28:]))
		phentsize, phnum = bo.Uint16(ident[42:]), bo.Uint16(ident[44:])
		if phentsize < phdrSize32 {
			return "", &FormatError{42, "e_phentsize", fmt.Sprintf("%d is smaller than a program header", phentsize)}
		}
	case 2:
		if n < elfHeader64 {
			return "", &FormatError{int64(n), "ELF header", "truncated"}
		}
		is64 = true
		phoff = bo.Uint64(ident[32:])
		phentsize, phnum = bo.Uint16(ident[54:]), bo.Uint16(ident[56:])
		if phentsize < phdrSize64 {
			return "", &FormatError{54, "e_phentsize", fmt.Sprintf("%d is smaller than a program header", phentsize)}
		}
	default:
		return "", &FormatError{4, "e_ident[EI_CLASS]", fmt.Sprintf("unknown class %d", ident[4])}
	}
	if phnum > maxPhnum {
		return "", &FormatError{56, "e_phnum", fmt.Sprintf("%d program headers exceed the limit of %d", phnum, maxPhnum)}
	}
	ph := make([]byte, phentsize)
	for i := range uint64(phnum) {
		off := phoff + i*uint64(phentsize)
		if off > 1<<62 {
			return "", &FormatError{int64(phoff), "e_phoff", "out of range"}
		}
		if _, err := r.ReadAt(ph, int64(off)); err != nil {
			return "", &FormatError{int64(off), "program header", err.Error()}
		}
		if bo.Uint32(ph) != ptNote {
			continue
		}
		var noff, nsize uint64
		if is64 {
			noff, nsize = bo.Uint64(ph[8:]), bo.Uint64(ph[32:])
		} else {
			noff, nsize = uint64(bo.Uint32(ph[4:])), uint64(bo.Uint32(ph[16:]))
		}
		if nsize > maxNoteSize || noff > 1<<62 {
			return "", &FormatError{int64(off), "p_filesz", fmt.Sprintf("note segment of %d bytes at %#x is out of bounds", nsize, noff)}
		}
		notes := make([]byte, nsize)
		if _, err := r.ReadAt(notes, int64(noff)); err != nil {
			return "", &FormatError{int64(noff), "PT_NOTE segment", err.Error()}
		}
		id, err := findNote(notes, int64(noff), bo)
		if err != nil || id != "" {
			return id, err
		}
	}
	return "", ErrNotFound
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
