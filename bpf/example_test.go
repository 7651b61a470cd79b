package bpf_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sprof/sprof/bpf"
)

// Sample every process at 99 Hz for a second and count samples per command.
func Example() {
	s, err := bpf.Open(bpf.Config{Frequency: 99, User: true, Kernel: true})
	if errors.Is(err, bpf.ErrPermission) {
		log.Fatal(err) // one line that says which privileges are missing and how to get them
	}
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	perComm := map[string]int{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range 4 {
		<-tick.C
		if _, err := s.Read(func(x *bpf.Sample) {
			// x and its slices are reused after this call: copy what you keep.
			perComm[string(x.Comm[:])]++
		}); err != nil {
			log.Fatal(err)
		}
	}
	lost, _ := s.Lost()
	fmt.Println(len(perComm) > 0, lost)
}

// Copy the top 16 KiB of the stack in samples of one process, whose code
// lacks frame pointers, for unwinding in user space.
func ExampleSampler_SetCopy() {
	s, err := bpf.Open(bpf.Config{Frequency: 99, User: true, StackCopy: 16384})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	const pid = 4242 // a process that maps a library built without frame pointers
	if err := s.SetCopy(pid, true); err != nil {
		log.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if _, err := s.Read(func(x *bpf.Sample) {
		if x.StackCopy != nil {
			// x.StackCopy[i] is the byte at address x.SP+i: unwind from
			// x.PC, x.SP, x.FP (and x.LR on arm64) reading only there.
			fmt.Println(x.Pid, len(x.StackCopy), x.StackCopyTruncated)
		}
	}); err != nil {
		log.Fatal(err)
	}
}
