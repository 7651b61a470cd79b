package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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
			return fmt.Errorf("duration %q is negative (examples: 10, 10s, 1m30s, 500ms)", s)
		}
		*d = durationValue(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 10, 10s, 1m30s, 500ms)", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative (examples: 10, 10s, 1m30s, 500ms)", s)
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) Type() string { return "duration" }

// frequencyValue is a pflag.Value for a sampling frequency in Hz, so a
// mistyped -F says what it takes rather than quoting strconv. The range is
// checked once parsing is done (see checkFrequency).
type frequencyValue int

func (f *frequencyValue) String() string { return strconv.Itoa(int(*f)) }

func (f *frequencyValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not a whole number of samples per second (examples: 19, 99, 499)")
	}
	*f = frequencyValue(n)
	return nil
}

func (f *frequencyValue) Type() string { return "hz" }

// checkFrequency refuses a frequency below 1 Hz or above the kernel's
// kernel.perf_event_max_sample_rate, naming the range.
func checkFrequency(hz int) error {
	max, err := maxSampleRate()
	switch {
	case hz < 1 && err == nil:
		return usagef("--frequency %d: must be 1 to %d Hz (kernel.perf_event_max_sample_rate)", hz, max)
	case hz < 1:
		return usagef("--frequency %d: must be at least 1 Hz", hz)
	case err == nil && hz > max:
		return usagef("--frequency %d is above the kernel's limit of %d Hz (kernel.perf_event_max_sample_rate); lower -F or raise the sysctl", hz, max)
	}
	return nil
}

// maxSampleRate reads kernel.perf_event_max_sample_rate, the highest
// frequency the kernel accepts for a sampling event.
func maxSampleRate() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_sample_rate")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// sizeValue is a pflag.Value for byte sizes with an optional K, M or G
// suffix (powers of 1024).
type sizeValue int

// String writes the size as Set reads it, with the largest suffix that
// divides it, so that help text shows 16M rather than 16777216.
func (v *sizeValue) String() string {
	n := int(*v)
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.Itoa(n/u.mult) + u.suffix
		}
	}
	return strconv.Itoa(n)
}

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
