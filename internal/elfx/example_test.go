package elfx_test

import (
	"debug/elf"
	"fmt"
	"os"

	"github.com/sprof/sprof/internal/elfx"
)

// Read contains what debug/elf may do with a hostile file.
func ExampleRead() {
	f, err := os.Open("/bin/sh")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	err = elfx.Read(f, "/bin/sh", func(ef *elf.File) error {
		fmt.Println("Go program:", elfx.IsGo(ef))
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// Go program: false
	// error: <nil>
}
