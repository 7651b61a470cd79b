package symbolize_test

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/sprof/sprof/symbolize"
)

// mapping finds the /proc/self/maps line that holds pc and returns the
// mapped file and the file offset of pc, as a profiler computes them.
func mapping(pc uint64) (string, uint64) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-limit perms offset dev inode path
		fld := strings.Fields(sc.Text())
		if len(fld) < 6 {
			continue
		}
		start, limit, _ := strings.Cut(fld[0], "-")
		lo, _ := strconv.ParseUint(start, 16, 64)
		hi, _ := strconv.ParseUint(limit, 16, 64)
		off, _ := strconv.ParseUint(fld[2], 16, 64)
		if lo <= pc && pc < hi {
			return fld[5], pc - lo + off
		}
	}
	return "", 0
}

func ExampleELF() {
	pc := uint64(reflect.ValueOf(strings.ToUpper).Pointer())
	path, off := mapping(pc)

	s := symbolize.NewELF(symbolize.Options{})
	frames, err := s.Symbolize(nil, symbolize.Binary{Path: path}, off)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range frames {
		fmt.Println(f.Function)
	}
	// Output: strings.ToUpper
}

func ExampleReadKallsyms() {
	k, err := symbolize.ReadKallsyms(strings.NewReader(
		"ffffffff81000000 T do_sys_openat2\n"+
			"ffffffff81000200 T __x64_sys_getpid\n"+
			"ffffffffc0001000 t ext4_file_read_iter\t[ext4]\n"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, addr := range []uint64{0xffffffff81000042, 0xffffffffc0001010} {
		f := k.Symbolize(nil, addr)[0]
		fmt.Println(strings.TrimSpace(f.Function + " " + f.File))
	}
	// Output:
	// do_sys_openat2
	// ext4_file_read_iter [ext4]
}
