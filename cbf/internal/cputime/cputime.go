// Package cputime measures the CPU time a goroutine uses, for benchmarks
// that report it next to wall time: the machines that run them are shared,
// and wall time counts other programs' turns on the CPU.
package cputime

import (
	"runtime"
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD, which the syscall package lacks.
const rusageThread = 1

// Meter measures the CPU time of the calling goroutine between Start and
// Stop, which it pins to its thread meanwhile. The garbage collector's own
// threads are not counted.
type Meter struct{ start time.Duration }

// Start pins the goroutine to its thread and starts measuring.
func Start() Meter {
	runtime.LockOSThread()
	return Meter{threadTime()}
}

// Stop returns the CPU time used since Start and unpins the goroutine.
func (m Meter) Stop() time.Duration {
	d := threadTime() - m.start
	runtime.UnlockOSThread()
	return d
}

func threadTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
