package debugfile_test

import (
	"fmt"

	"github.com/sprof/sprof/symbolize/buildid"
	"github.com/sprof/sprof/symbolize/debugfile"
)

func ExampleFind() {
	bin := "../../testdata/symbolize/c-stripped"
	id, err := buildid.File(bin)
	if err != nil {
		fmt.Println(err)
		return
	}
	p := debugfile.Find(debugfile.Request{
		BuildID:   id,
		DebugDirs: []string{"../../testdata/symbolize/debug"},
	})
	fmt.Println(p != "")
	// Output: true
}
