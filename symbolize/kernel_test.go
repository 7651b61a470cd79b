package symbolize

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestKernelAgainstKallsyms reads /proc/kallsyms independently of the
// parser and checks that known syscall functions, and a function of a
// module, are found from their first byte and from inside them.
func TestKernelAgainstKallsyms(t *testing.T) {
	k, err := LoadKernel()
	if errors.Is(err, ErrKernelAddressesHidden) && os.Getuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("kernel addresses are hidden from non-root users:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type entry struct {
		addr         uint64
		name, module string
	}
	var all []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fld := strings.Fields(sc.Text())
		a, _ := strconv.ParseUint(fld[0], 16, 64)
		e := entry{addr: a, name: fld[2]}
		if len(fld) == 4 {
			e.module = fld[3]
		}
		all = append(all, e)
	}
	wanted := map[string]bool{"do_sys_openat2": true, "__x64_sys_getpid": true, "__arm64_sys_getpid": true}
	found := 0
	moduleChecked := false
	for i, e := range all {
		isModule := e.module != "" && !moduleChecked
		if !wanted[e.name] && !isModule {
			continue
		}
		// The next symbol by address bounds the function.
		next := ^uint64(0)
		for _, o := range all {
			if o.addr > e.addr && o.addr < next {
				next = o.addr
			}
		}
		for _, a := range []uint64{e.addr, e.addr + (next-e.addr)/2, next - 1} {
			if next == ^uint64(0) && a != e.addr {
				continue
			}
			got := k.Symbolize(nil, a)
			if len(got) != 1 {
				t.Errorf("%#x (%s): %d frames", a, e.name, len(got))
				continue
			}
			// Several symbols may share the address; any of them is right.
			ok := false
			for _, o := range all[max(i-8, 0):min(i+8, len(all))] {
				ok = ok || (o.addr == e.addr && o.name == got[0].Function && o.module == got[0].File)
			}
			if !ok {
				t.Errorf("%#x: %q %q, kallsyms says %q %q", a, got[0].Function, got[0].File, e.name, e.module)
			}
		}
		if isModule {
			moduleChecked = true
			t.Logf("module function %s %s checked", e.name, e.module)
		} else {
			found++
		}
	}
	if found < 2 {
		t.Errorf("found %d of the syscall functions in /proc/kallsyms", found)
	}
}

func TestReadKallsyms(t *testing.T) {
	const text = `ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t helper
ffffffff81000200 W weak_fn
ffffffff81000300 T _etext
ffffffff81000400 D some_data
ffffffffc0001000 t ext4_read	[ext4]
ffffffffc0001080 T ext4_write	[ext4]
`
	const modules = "ext4 512 1 - Live 0xffffffffc0001000 (E)\n"
	k, err := ReadKallsyms(strings.NewReader(text), strings.NewReader(modules))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr       uint64
		name, file string
	}{
		{0xffffffff81000000, "startup_64", ""},
		{0xffffffff810000ff, "startup_64", ""},
		{0xffffffff81000100, "helper", ""},
		{0xffffffff81000250, "weak_fn", ""},
		{0xffffffff81000300, "", ""}, // _etext ends the kernel's text
		{0xffffffff81000450, "", ""}, // data
		{0xffffffff80000000, "", ""}, // before everything
		{0xffffffffc0001010, "ext4_read", "[ext4]"},
		{0xffffffffc0001090, "ext4_write", "[ext4]"},
		{0xffffffffc00011ff, "ext4_write", "[ext4]"},
		{0xffffffffc0001200, "", ""}, // past the module's end
	}
	for _, tt := range tests {
		got := k.Symbolize(nil, tt.addr)
		if tt.name == "" {
			if len(got) != 0 {
				t.Errorf("%#x: %+v, want no frames", tt.addr, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Function != tt.name || got[0].File != tt.file {
			t.Errorf("%#x: %+v, want %s %s", tt.addr, got, tt.name, tt.file)
		}
	}
}

func TestReadKallsymsErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       error
		wantMsg    string
		modules    string
	}{
		{"kptr_restrict", "0000000000000000 T startup_64\n0000000000000000 t helper\n", ErrKernelAddressesHidden, "", ""},
		{"empty", "", nil, "no symbols", ""},
		{"bad address", "zz T f\n", nil, "line 1: address", ""},
		{"bad type", "ffff TT f\n", nil, "line 1:", ""},
		{"bad module", "ffff t f ext4\n", nil, "not in brackets", ""},
		{"bad modules line", "ffff t f\n", nil, "modules: line 1", "ext4 x\n"},
		{"bad module size", "ffff t f\n", nil, "modules: line 1: size", "ext4 x 0 - Live 0xffff\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ReadKallsyms(strings.NewReader(tt.text), strings.NewReader(tt.modules))
			if err == nil || k != nil {
				t.Fatalf("ReadKallsyms = %v, %v; want an error", k, err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
	// A nil Kernel (addresses hidden) symbolizes nothing, without panicking.
	var k *Kernel
	if got := k.Symbolize(nil, 0xffffffff81000000); len(got) != 0 {
		t.Errorf("nil Kernel gave %v", got)
	}
}

func BenchmarkKernel(b *testing.B) {
	k, err := LoadKernel()
	if err != nil {
		b.Skip(err)
	}
	addrs := k.syms.start
	var n int
	cpu0 := cpuTime()
	for b.Loop() {
		k.Symbolize(nil, addrs[n%len(addrs)]+1)
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/lookup")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/lookup")
}

// BenchmarkLoadKernel reads /proc/kallsyms; retained-MB is the heap the
// Kernel keeps, which a long-lived agent holds all its life.
func BenchmarkLoadKernel(b *testing.B) {
	var k *Kernel
	var err error
	var before, after runtime.MemStats
	for b.Loop() {
		k = nil
		runtime.GC()
		runtime.ReadMemStats(&before)
		if k, err = LoadKernel(); err != nil {
			b.Skip(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "retained-MB")
	b.ReportMetric(float64(len(k.syms.start)), "symbols")
}
