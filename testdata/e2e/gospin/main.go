// Command gospin burns CPU in main.main -> main.a -> main.b -> main.c for
// the number of seconds given as its first argument (default 2).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

// c reads the clock every 10 million iterations (a few ms), not more
// often: Go calls the vDSO on the g0 stack, where a frame-pointer walk
// must stop (the goroutine's frames lie outside that stack), so time spent
// reading the clock is time without the chain.
//
//go:noinline
func c(end time.Time) uint64 {
	var n uint64
	for time.Now().Before(end) {
		for i := range uint64(10_000_000) {
			sink += i ^ n
			n++
		}
	}
	return n
}

//go:noinline
func b(end time.Time) uint64 { return c(end) + 1 }

//go:noinline
func a(end time.Time) uint64 { return b(end) + 1 }

func main() {
	secs := 2.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			secs = s
		}
	}
	if a(time.Now().Add(time.Duration(secs*float64(time.Second)))) == 0 {
		os.Exit(1)
	}
}
