package collector

import "testing"

// FuzzParseMaps feeds arbitrary /proc/PID/maps contents to the parser,
// which must not panic and must return only well-formed ranges.
func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(sampleMaps))
	f.Add([]byte("10-20 r-xp 0 08:01 1 /x (deleted)\n"))
	f.Add([]byte("\n\n   \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, err := parseMaps(b)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.limit <= e.start {
				t.Fatalf("bad entry %+v", e)
			}
		}
	})
}

// FuzzParseStartTime feeds arbitrary /proc/PID/stat contents to the parser.
func FuzzParseStartTime(f *testing.F) {
	f.Add([]byte("4242 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 98765 20 21\n"))
	f.Fuzz(func(t *testing.T, b []byte) { parseStartTime(b) })
}
