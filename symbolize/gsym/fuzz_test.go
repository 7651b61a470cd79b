package gsym

import (
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
		var res LookupResult
		r.LookupInto(&res, addr)
		n := min(r.NumFunctions(), 256)
		for i := 0; i < n; i++ {
			a := r.Address(i)
			r.LookupInto(&res, a)
			r.LookupInto(&res, a+3)
			if fi, err := r.FunctionInfo(i); err == nil {
				r.LookupInto(&res, fi.Range.End-1)
			}
		}
		if r.NumFunctions() <= 256 {
			r.Dump(io.Discard)
			if c, err := NewCreatorFrom(r); err == nil {
				c.Finalize()
				c.Encode(EncodeOptions{})
			}
		}
	})
}
