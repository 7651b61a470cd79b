package buildid_test

import (
	"fmt"
	"os"

	"github.com/sprof/sprof/symbolize/buildid"
)

func ExampleFile() {
	id, err := buildid.File(os.Args[0])
	if err != nil {
		fmt.Println("no build ID:", err)
		return
	}
	fmt.Println(len(id) > 0)
}
