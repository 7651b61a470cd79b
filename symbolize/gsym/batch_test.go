package gsym_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/sprof/sprof/internal/gsymbench"
	"github.com/sprof/sprof/symbolize/gsym"
)

// checkBatch looks addrs up in one batch on r and one by one on single,
// and fails at the first result that differs in any field.
func checkBatch(t *testing.T, name string, r, single *gsym.Reader, addrs []uint64) {
	t.Helper()
	var want gsym.LookupResult
	seen := make([]bool, len(addrs))
	bad := 0
	r.LookupBatch(addrs, func(i int, got *gsym.LookupResult, err error) {
		if seen[i] {
			t.Fatalf("%s: address %d (0x%x) answered twice", name, i, addrs[i])
		}
		seen[i] = true
		werr := single.LookupInto(&want, addrs[i])
		if bad < 5 && (!sameError(err, werr) || !sameResult(got, &want)) {
			bad++
			t.Errorf("%s: 0x%x: batch %+v, %v; single %+v, %v", name, addrs[i], *got, err, want, werr)
		}
	})
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("%s: address %d (0x%x) not answered", name, i, addrs[i])
	}
}

func sameError(a, b error) bool {
	return a == b || a != nil && b != nil && a.Error() == b.Error()
}

func sameResult(a, b *gsym.LookupResult) bool {
	return a.Addr == b.Addr && a.FuncRange == b.FuncRange && a.FuncName == b.FuncName &&
		slices.Equal(a.Locations, b.Locations) && slices.Equal(a.CallSiteRegexes, b.CallSiteRegexes) &&
		(a.CallSiteRegexes == nil) == (b.CallSiteRegexes == nil)
}

// shuffled returns addrs in a random order, with some repeated.
func shuffled(addrs []uint64) []uint64 {
	rng := rand.New(rand.NewPCG(3, 4))
	out := slices.Clone(addrs)
	for i := 0; i < len(addrs)/10; i++ {
		out = append(out, addrs[rng.IntN(len(addrs))])
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestBatchMatchesSingle: a batch gives, for every byte of every function
// of LLVM's files (the first 512 of larger ones), the bytes around them
// and addresses outside the file, exactly the results of single lookups,
// whether the functions are streamed or decoded in the cache.
func TestBatchMatchesSingle(t *testing.T) {
	for _, name := range gsym.LLVMFiles {
		data, err := os.ReadFile(filepath.Join(gsym.Fixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		single, err := gsym.NewReader(data)
		if err != nil {
			t.Fatal(err)
		}
		addrs := []uint64{0, 1, ^uint64(0), single.Header().BaseAddress - 1}
		for i := 0; i < single.NumFunctions(); i++ {
			f, err := single.FunctionInfo(i)
			if err != nil {
				t.Fatal(err)
			}
			for a := f.Range.Start - min(f.Range.Start, 4); a <= f.Range.End+4 && a-f.Range.Start <= 512; a++ {
				addrs = append(addrs, a)
			}
		}
		addrs = shuffled(addrs)
		for _, promote := range []uint32{1 << 31, 1} {
			r, err := gsym.NewReader(data)
			if err != nil {
				t.Fatal(err)
			}
			r.SetPromote(promote)
			if promote == 1 { // decode every function into the cache
				var res gsym.LookupResult
				for _, a := range addrs {
					r.LookupInto(&res, a)
				}
			}
			checkBatch(t, name, r, single, addrs)
		}
	}
}

// TestBatchSmall: batches below the radix sort's threshold, empty ones
// and ones whose span does not fit a key.
func TestBatchSmall(t *testing.T) {
	r, err := gsym.Open(filepath.Join(gsym.Fixtures, "gofix.llvm.gsym"))
	if err != nil {
		t.Fatal(err)
	}
	a := r.Address(r.NumFunctions() / 2)
	for _, addrs := range [][]uint64{nil, {a}, {a + 3, a, a}, {^uint64(0), a, 0, a + 1}} {
		checkBatch(t, "small", r, r, addrs)
	}
	many := make([]uint64, 1000)
	for i := range many {
		many[i] = a + uint64(i)
	}
	many[7] = ^uint64(0)
	checkBatch(t, "wide", r, r, shuffled(many))
}

// TestBatchParallel: a batch large enough to be cut into parts, one per
// CPU, answers every address once, as single lookups do.
func TestBatchParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	r, err := gsym.Open(filepath.Join(gsym.Fixtures, "cxx.llvm.gsym"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lo, hi := r.Address(0), r.Address(r.NumFunctions()-1)+64
	var addrs []uint64
	for len(addrs) < 50_000 {
		for a := lo - 8; a < hi; a++ {
			addrs = append(addrs, a)
		}
	}
	checkBatch(t, "parallel", r, r, shuffled(addrs))
}

// TestBatchLargeFile compares a batch with single lookups at every byte of
// a large Go binary's GSYM (gsymbench.File), in shuffled batches of a
// million addresses.
func TestBatchLargeFile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: every address of a large file")
	}
	path := gsymbench.File(t)
	r, err := gsym.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	single, err := gsym.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	lo := r.Address(0)
	hi := r.Address(r.NumFunctions()-1) + 64
	const chunk = 1 << 20
	addrs := make([]uint64, 0, chunk)
	for a := lo - 16; a < hi; a += chunk {
		addrs = addrs[:0]
		for b := a; b < min(a+chunk, hi); b++ {
			addrs = append(addrs, b)
		}
		checkBatch(t, path, r, single, shuffled(addrs))
		if t.Failed() {
			return
		}
	}
}

// TestBatchStreamedLargeFile: on a large Go binary's GSYM, a batch that
// streams every function (line cursor, scratch inline trees) and single
// lookups that stream give the answers of fully decoded records (rows
// and nodes decoded by other code) at 300,000 spread addresses.
// TestBatchLargeFile's batches, a function's every byte at once, answer
// from decoded records.
func TestBatchStreamedLargeFile(t *testing.T) {
	path := gsymbench.File(t)
	open := func(promote uint32) *gsym.Reader {
		r, err := gsym.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		r.SetPromote(promote)
		return r
	}
	streamed, decoded := open(1<<31), open(1)
	addrs := gsymbench.Addresses(streamed, 300_000)
	checkBatch(t, "streamed batch", streamed, decoded, addrs)
	checkBatch(t, "streamed single", decoded, streamed, addrs[:50_000])
}
