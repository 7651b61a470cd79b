package gsym

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// FuzzReader opens arbitrary bytes as a GSYM file, then looks up addresses
// around every function and decodes every record: nothing may panic, hang
// or allocate without bound. The seeds are LLVM's files and their version
// 2 and big-endian encodings.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"cinline.llvm.gsym", "debuglink.llvm.gsym", "cxx.llvm.gsym"} {
		b := readFixture(f, name)
		f.Add(b, uint64(0x1150))
		r, err := NewReader(b)
		if err != nil {
			f.Fatal(err)
		}
		c, err := NewCreatorFrom(r)
		if err != nil {
			f.Fatal(err)
		}
		c.Finalize()
		for _, o := range []EncodeOptions{{Version: 2}, {ByteOrder: binary.BigEndian}} {
			if e, err := c.Encode(o); err == nil {
				f.Add(e, uint64(0x1190))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		r, err := NewReader(data)
		if err != nil {
			return
		}
		// Lookups stream, so a batch must answer exactly as they do.
		r.cache.promote = 1 << 31
		var res LookupResult
		addrs := []uint64{addr}
		n := min(r.NumFunctions(), 256)
		for i := 0; i < n; i++ {
			a := r.Address(i)
			addrs = append(addrs, a, a+3)
			if fi, err := r.FunctionInfo(i); err == nil {
				addrs = append(addrs, fi.Range.End-1)
			}
		}
		texts := make([][]byte, len(addrs))
		for i, a := range addrs {
			texts[i] = lookupText(r, &res, a)
		}
		r.LookupBatch(addrs, func(i int, res *LookupResult, err error) {
			got := res.AppendText(nil)
			if err != nil {
				got = AppendLookupError(nil, addrs[i], err)
			}
			if !bytes.Equal(got, texts[i]) {
				t.Errorf("0x%x: batch %q, single %q", addrs[i], got, texts[i])
			}
		})
		if r.NumFunctions() <= 256 {
			r.Dump(io.Discard)
			if c, err := NewCreatorFrom(r); err == nil {
				c.Finalize()
				c.Encode(EncodeOptions{})
			}
		}
	})
}

// lookupText is the lookup of a as llvm-gsymutil prints it.
func lookupText(r *Reader, res *LookupResult, a uint64) []byte {
	if err := r.LookupInto(res, a); err != nil {
		return AppendLookupError(nil, a, err)
	}
	return res.AppendText(nil)
}
