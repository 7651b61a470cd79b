// Go fixture: a small program with inlined calls and closures.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

type point struct{ x, y int }

func (p point) dist2() int { return p.x*p.x + p.y*p.y }

//go:noinline
func closest(ps []point) point {
	sort.Slice(ps, func(i, j int) bool { return ps[i].dist2() < ps[j].dist2() })
	return ps[0]
}

func main() {
	var ps []point
	for i, a := range os.Args {
		ps = append(ps, point{len(a), i})
	}
	ps = append(ps, point{3, 4})
	fmt.Println(strings.ToUpper(fmt.Sprint(closest(ps))))
}
