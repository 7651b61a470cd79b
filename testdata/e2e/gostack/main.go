// Command gostack keeps Go's runtime switching stacks under its
// goroutines until killed, for tests of the frame-pointer walk's stack
// switches:
//
//	gostack assist: goroutines allocate hard while a large live heap keeps
//	    the collector marking, so they are charged GC assist work, which
//	    runs on the g0 stack through runtime.systemstack
//	    (runtime.gcAssistAlloc1, runtime.gcDrainN).
//	gostack grow: goroutines recurse deep with large frames from a fresh,
//	    small stack, so their stacks grow again and again through
//	    runtime.morestack (runtime.newstack, runtime.copystack).
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// node makes a heap of pointers that takes the collector a while to mark.
type node struct {
	next *node
	refs [2]*node
}

// live keeps that heap alive.
var live *node

var sink []*node

// churn allocates and drops small objects, in a loop that never ends.
//
//go:noinline
func churn(id int) {
	for i := 0; ; i++ {
		b := make([]*node, 8+i%64)
		b[0] = live
		if i%64 == 0 {
			sink = b
		}
	}
}

//go:noinline
func assist(id int) { churn(id) }

// skip returns the node n links after x.
func (x *node) skip(n int) *node {
	for ; x != nil && n > 0; n-- {
		x = x.next
	}
	return x
}

// recurse uses about 1 KiB of stack per call.
//
//go:noinline
func recurse(n int) byte {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return recurse(n-1) + pad[n%len(pad)]
}

// grow runs recursions 256 deep on new goroutines, one after another:
// each starts on a small stack that doubles to 512 KiB on the way down.
//
//go:noinline
func grow(done chan byte) {
	done <- recurse(256)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gostack assist|grow")
		os.Exit(2)
	}
	n := runtime.GOMAXPROCS(0)
	switch os.Args[1] {
	case "assist":
		// Little room to allocate before the next cycle: the goroutines
		// outpace the background mark workers and are made to assist.
		debug.SetGCPercent(5)
		for i := range 1 << 21 {
			live = &node{next: live, refs: [2]*node{live, live.skip(i % 7)}}
		}
		for id := range n {
			go assist(id)
		}
		select {}
	case "grow":
		done := make(chan byte, n)
		for range n {
			go grow(done)
		}
		for {
			<-done
			go grow(done)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: gostack assist|grow")
		os.Exit(2)
	}
}
