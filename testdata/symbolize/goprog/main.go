// Fixture for symbolize/: a Go program with methods, generics and
// closures. The tests build it with the Go toolchain they run under.
package main

import (
	"fmt"
	"os"
)

type counter struct{ n int }

//go:noinline
func (c *counter) add(k int) { c.n += k }

//go:noinline
func sum[T int | float64](xs []T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

//go:noinline
func spin(n int) int {
	r := 0
	for i := range n {
		r += i * i
	}
	return r
}

func main() {
	c := &counter{}
	f := func(k int) { c.add(spin(k)) }
	for i := range len(os.Args) + 3 {
		f(i)
	}
	fmt.Println(c.n, sum([]int{1, 2}), sum([]float64{1.5}))
}
