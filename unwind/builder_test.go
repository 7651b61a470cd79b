package unwind

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sprof/sprof/sframe"
)

// TestBuildOrder: the builder runs one build at a time, the queued ones
// with the least CFI first. The builds wait on the test, so the order
// does not depend on how fast the worker runs.
func TestBuildOrder(t *testing.T) {
	started := make(chan string)
	gate := make(chan struct{})
	b := NewBuilder[string](func(_ io.ReaderAt, name string, _ bool) (*sframe.Table, Method, error, error) {
		started <- name
		<-gate
		return nil, 0, nil, io.EOF
	}, nil)
	defer b.Close()
	submit := func(name string, cost int64) {
		f, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		b.Submit(&Job[string]{Key: name, File: f, Name: name, Cost: cost})
	}
	submit("first", 100)
	order := []string{<-started} // the worker has taken the first job
	submit("large", 300)
	submit("small", 10)
	submit("medium", 200)
	var done []string
	for len(order) < 4 {
		gate <- struct{}{} // let the build under way end
		order = append(order, <-started)
		for _, j := range b.Take() {
			done = append(done, j.Key)
		}
	}
	gate <- struct{}{}
	for len(done) < 4 {
		if !b.Wait(10 * time.Second) {
			t.Fatalf("%d builds ended, want 4", len(done))
		}
		for _, j := range b.Take() {
			done = append(done, j.Key)
			if j.Err != io.EOF {
				t.Errorf("job %s: error %v, want the build's", j.Key, j.Err)
			}
		}
	}
	if want := []string{"first", "small", "medium", "large"}; !slices.Equal(order, want) || !slices.Equal(done, want) {
		t.Errorf("started %q, finished %q; want %q, one at a time", order, done, want)
	}
}

// TestBuildClosed: a job submitted after Close is not built, and its file
// is closed.
func TestBuildClosed(t *testing.T) {
	b := NewBuilder[int](func(io.ReaderAt, string, bool) (*sframe.Table, Method, error, error) {
		t.Error("a closed builder built a table")
		return nil, 0, nil, io.EOF
	}, nil)
	b.Close()
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	b.Submit(&Job[int]{File: f})
	if _, err := f.Stat(); err == nil {
		t.Error("the job's file is still open")
	}
	if b.Wait(time.Millisecond) {
		t.Error("a closed builder finished a job")
	}
}

// TestBuildCloseWaits: Close drops the queued jobs and returns only once
// the build under way has ended.
func TestBuildCloseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var built []string
		b := NewBuilder[string](func(_ io.ReaderAt, name string, _ bool) (*sframe.Table, Method, error, error) {
			built = append(built, name)
			<-gate
			return nil, 0, nil, io.EOF
		}, nil)
		queued := make([]*os.File, 2)
		for i, name := range []string{"first", "queued"} {
			f, err := os.Open(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			queued[i] = f
			b.Submit(&Job[string]{Key: name, File: f, Name: name, Cost: int64(i)})
		}
		synctest.Wait() // the worker is in the first build
		closed := make(chan struct{})
		go func() {
			b.Close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a build was under way")
		default:
		}
		if _, err := queued[1].Stat(); err == nil {
			t.Error("the queued job's file is still open")
		}
		close(gate)
		<-closed
		if !slices.Equal(built, []string{"first"}) {
			t.Errorf("built %q, want only the first", built)
		}
		if _, err := queued[0].Stat(); err == nil {
			t.Error("the built job's file is still open")
		}
	})
}

// TestBuilderStore: with a store, a table is built once and stored; the
// next run's builder reads it instead of building it, and a damaged file
// is built again, said in StoreErr, and replaced.
func TestBuilderStore(t *testing.T) {
	dir := t.TempDir()
	builds := 0
	run := func() *Job[string] {
		s, err := OpenStore(dir, "producer")
		if err != nil {
			t.Fatal(err)
		}
		b := NewBuilder[string](func(io.ReaderAt, string, bool) (*sframe.Table, Method, error, error) {
			builds++
			return smallTable(t), MethodEHFrame, nil, nil
		}, s)
		defer b.Close()
		f, err := os.Open(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		b.Submit(&Job[string]{Key: "app", File: f, Name: "app", BuildID: "ab12"})
		for {
			if done := b.Take(); len(done) > 0 {
				return done[0]
			}
			b.Wait(time.Minute)
		}
	}
	if j := run(); j.Err != nil || j.Stored || j.StoreErr != nil || builds != 1 {
		t.Fatalf("first run: err %v, stored %v, store error %v, %d builds; want 1 build, stored after", j.Err, j.Stored, j.StoreErr, builds)
	}
	j := run()
	if j.Err != nil || !j.Stored || j.StoreErr != nil || builds != 1 {
		t.Fatalf("second run: err %v, stored %v, store error %v, %d builds; want the stored table", j.Err, j.Stored, j.StoreErr, builds)
	}
	sameTable(t, "app", smallTable(t), j.Table)
	path := filepath.Join(dir, "ab12.eh.unwind")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if j := run(); j.Err != nil || j.Stored || j.StoreErr == nil || builds != 2 {
		t.Fatalf("damaged file: err %v, stored %v, store error %v, %d builds; want a build and the damage said", j.Err, j.Stored, j.StoreErr, builds)
	}
	if j := run(); !j.Stored || builds != 2 {
		t.Fatalf("after the rebuild: stored %v, %d builds; want the replaced file read", j.Stored, builds)
	}
}
