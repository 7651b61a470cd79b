package convert_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/sprof/sprof/symbolize/gsym"
	"github.com/sprof/sprof/symbolize/gsym/convert"
)

// Convert a binary to GSYM, write it, and look an address up in it.
func ExampleELF() {
	c, st, err := convert.ELF("../../../testdata/gsym/cinline", convert.Options{})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gsym")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "cinline.gsym")
	if err := c.WriteFile(out, gsym.EncodeOptions{ByteOrder: st.ByteOrder}); err != nil {
		log.Fatal(err)
	}
	r, err := gsym.Open(out)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	res, err := r.Lookup(0x11e8)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d functions from DWARF, %d in total\n", st.FromDWARF, st.Total)
	fmt.Print(string(res.AppendText(nil)))
	// Output:
	// 5 functions from DWARF, 12 in total
	// 0x00000000000011e8: add + 8 @ /src/cinline.c:11 [inlined]
	//                     twice + 8 @ /src/cinline.c:15 [inlined]
	//                     foo + 8 @ /src/cinline.c:19
}
