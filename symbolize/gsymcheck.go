package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/sprof/sprof/internal/outfile"
	"github.com/sprof/sprof/symbolize/gsym"
)

// A cache file is a GSYM file followed by a trailer: the CRC-32C of the
// GSYM file, little-endian, and checksumMagic. The GSYM reader checks
// every read, but a file changed on disk after it was written (a bad
// block, a stray write, an overwritten page) can still read well and give
// other names; the checksum, verified each time the file is mapped, says it
// is not what sprof wrote. CRC-32C runs in hardware at several GB/s, a
// fraction of what mapping the file costs (BenchmarkGSYMVerify). GSYM
// readers, LLVM's included, read only the tables the header locates, so
// the trailer does not stop `sprof gsym` or llvm-gsymutil from reading a
// cache file.
const checksumMagic = "sprofCRC"

const trailerLen = 4 + len(checksumMagic)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errNoChecksum is a cache file without a trailer: written by a sprof
// from before checksums, or cut.
var errNoChecksum = errors.New("no checksum trailer")

// checksumError is a cache file whose GSYM file does not match its
// checksum.
type checksumError struct{ got, want uint32 }

func (e *checksumError) Error() string {
	return fmt.Sprintf("checksum 0x%08x, want 0x%08x: the file changed after it was written", e.got, e.want)
}

// appendChecksum appends the trailer of gsymFile to it.
func appendChecksum(gsymFile []byte) []byte {
	gsymFile = binary.LittleEndian.AppendUint32(gsymFile, crc32.Checksum(gsymFile, castagnoli))
	return append(gsymFile, checksumMagic...)
}

// openCacheFile maps the cache file p once its checksum holds. The check
// reads the file rather than the mapping: touching every page of a fresh
// mapping costs a page fault each, several times what reading the file
// from the page cache and CRC-32C cost together (BenchmarkGSYMVerify), and
// lookups later touch only the pages they need.
func openCacheFile(p string) (*gsym.Reader, error) {
	if err := checkFile(p); err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	// Replaced only by rename, never written in place: the file mapped
	// is the one checked.
	return gsym.OpenVerified(p, func(data []byte) ([]byte, error) {
		if len(data) < trailerLen {
			return nil, errNoChecksum
		}
		return data[:len(data)-trailerLen], nil
	})
}

// checkFile matches the file p with its trailer.
func checkFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	n := st.Size() - int64(trailerLen)
	var trailer [trailerLen]byte
	if n < 0 {
		return errNoChecksum
	}
	if _, err := f.ReadAt(trailer[:], n); err != nil {
		return err
	}
	if string(trailer[4:]) != checksumMagic {
		return errNoChecksum
	}
	buf := make([]byte, min(n, 256<<10))
	var got uint32
	for off := int64(0); off < n; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), n-off)], off)
		if err != nil {
			return err
		}
		got = crc32.Update(got, castagnoli, buf[:k])
		off += int64(k)
	}
	if want := binary.LittleEndian.Uint32(trailer[:]); got != want {
		return &checksumError{got, want}
	}
	return nil
}

// writeCacheFile writes c as a cache file at p, atomically.
func writeCacheFile(p string, c *gsym.Creator, opts gsym.EncodeOptions) error {
	data, err := c.Encode(opts)
	if err != nil {
		return err
	}
	f, err := outfile.Create(p, nil)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(appendChecksum(data)); err != nil {
		return err
	}
	return f.Commit()
}
