package buildid

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// The kernel has no ELF file to read: it exports its notes, and each
// module's (/sys/module/NAME/notes/.note.gnu.build-id), as bare note
// streams in sysfs. perf names kernel samples by these build IDs too, so a
// recording's kernel matches perf's and a debuginfod server's vmlinux.
const kernelNotes = "/sys/kernel/notes"

// Notes returns the GNU build ID, as lower-case hex, in b: a bare stream of
// ELF notes in the host's byte order, such as the kernel exports.
func Notes(b []byte) (string, error) {
	return notes(b, binary.NativeEndian)
}

func notes(b []byte, bo binary.ByteOrder) (string, error) {
	id, err := findNote(b, 0, bo)
	if err == nil && id == "" {
		err = ErrNotFound
	}
	return id, err
}

// NotesFile returns the GNU build ID in the note stream of the file at path,
// reading at most its first 64 KiB.
func NotesFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxNoteSize))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	id, err := Notes(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// Kernel returns the build ID of the running kernel, from /sys/kernel/notes.
func Kernel() (string, error) { return NotesFile(kernelNotes) }
