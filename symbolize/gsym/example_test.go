package gsym_test

import (
	"fmt"
	"log"

	"github.com/sprof/sprof/symbolize/gsym"
)

// Look up an address in a GSYM file and walk its inline stack, innermost
// function first.
func ExampleReader_Lookup() {
	r, err := gsym.Open("../../testdata/gsym/cinline.llvm.gsym")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	res, err := r.Lookup(0x1225) // in hash, inside mix inlined into mix2
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.FuncName)
	for _, loc := range res.Locations {
		fmt.Printf("%s %s:%d\n", loc.Name, loc.Path(), loc.Line)
	}
	// Output:
	// hash
	// mix /src/inl.h:4
	// mix2 /src/inl.h:9
	// hash /src/cinline.c:26
}
