package debuginfod_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sprof/sprof/symbolize/debuginfod"
)

// A client of the servers in DEBUGINFOD_URLS fetches a debug file into a
// directory that symbolizers then search like /usr/lib/debug.
func Example() {
	c := debuginfod.FromEnv(os.TempDir() + "/sprof-debuginfod")
	if c == nil {
		fmt.Println("DEBUGINFOD_URLS is not set")
		return
	}
	path, err := c.Fetch(context.Background(), "db5a3c5d3c8aa13e84bf9a60585564a67fc1f7ce")
	fmt.Println(path, err)
}
