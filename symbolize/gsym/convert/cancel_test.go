package convert

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// A conversion whose Context is done ends without starting another
// compilation unit, with the context's error.
func TestConvertCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, total := 0, 0
	_, _, err := ELF(filepath.Join(fixtures, "gofix"), Options{Context: ctx, Progress: func(d, n int) {
		done, total = d, n
		cancel()
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want %v", err, context.Canceled)
	}
	if done != 1 || total < 2 {
		t.Errorf("%d of %d units converted, want 1 of several", done, total)
	}
	if _, _, err := ELF(filepath.Join(fixtures, "gofix"), Options{Context: ctx}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before it began: error %v, want %v", err, context.Canceled)
	}
}
