// Package readall reads a file of unknown size whole, within a bound, into
// a buffer the caller may keep: /proc files report no size, and io.ReadAll
// and os.ReadFile grow a fresh buffer by a quarter at a time once it is
// large, allocating about five times what they return.
package readall

import (
	"fmt"
	"io"
	"slices"
)

// Append appends what r holds to dst, doubling dst's capacity as it fills
// (from at least 4 KiB), and fails once more than limit bytes were read.
// Passing a buffer kept from the last call as dst[:0] reads without
// allocating.
func Append(dst []byte, r io.Reader, limit int) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			if len(dst)-start > limit {
				return nil, fmt.Errorf("more than %d bytes", limit)
			}
			dst = slices.Grow(dst, max(len(dst), 4<<10))
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			if len(dst)-start > limit {
				return nil, fmt.Errorf("more than %d bytes", limit)
			}
			return dst, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
