package perfring_test

import (
	"fmt"
	"log"

	"github.com/sprof/sprof/collector/perfring"
)

// Drain the side band on a timer and follow execs; a real caller would
// call Read every 250 ms.
func Example() {
	tr, err := perfring.Open(perfring.DefaultPages)
	if err != nil {
		log.Fatal(err) // not root, or no perf events
	}
	defer tr.Close()
	tr.Read(func(r *perfring.Record) {
		if r.IsExec() {
			fmt.Printf("%d exec'd %s\n", r.Pid, r.Comm)
		}
	})
}
