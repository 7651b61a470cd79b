package unwind_test

import (
	"fmt"

	"github.com/sprof/sprof/sframe"
	"github.com/sprof/sprof/unwind"
)

// Only an unwind that reached the outermost frame leaves a whole stack.
func ExampleStop_Truncated() {
	for _, r := range []sframe.StopReason{sframe.StopOutermost, sframe.StopReadFault, sframe.StopFull} {
		s := unwind.FromSFrame(r)
		fmt.Printf("%s: truncated %v\n", s, s.Truncated())
	}
	// Output:
	// outermost frame: truncated false
	// read outside the stack copy: truncated true
	// depth limit: truncated true
}
