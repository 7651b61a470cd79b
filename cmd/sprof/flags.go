package main

import (
	"fmt"
	"strconv"
	"time"
)

// durationValue is a pflag.Value for durations that also takes plain
// seconds, as perf's `-- sleep 10` and bcc's positional seconds have taught
// people to type: "10" is ten seconds, "1m30s" and "250ms" work too.
type durationValue time.Duration

func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Set(s string) error {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 {
			return fmt.Errorf("duration %q is negative", s)
		}
		*d = durationValue(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 10, 10s, 1m30s, 500ms)", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) Type() string { return "duration" }

// sizeValue is a pflag.Value for byte sizes with an optional K, M or G
// suffix (powers of 1024).
type sizeValue int

func (v *sizeValue) String() string { return strconv.Itoa(int(*v)) }

func (v *sizeValue) Set(s string) error {
	mult := 1
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > (1<<31)/mult {
		return fmt.Errorf("%q is not a size (examples: 4096, 64K, 8M)", s)
	}
	*v = sizeValue(n * mult)
	return nil
}

func (v *sizeValue) Type() string { return "size" }
