// Package hexnum parses the hexadecimal numbers of text formats
// (/proc/kallsyms, address lists) without the allocation a string
// conversion for strconv costs per number.
package hexnum

// Parse parses 1 to 16 hexadecimal digits, either case, without a prefix.
func Parse(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}
