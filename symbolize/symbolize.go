package symbolize

import "github.com/sprof/sprof/stacks"

// Binary identifies an object file to symbolize.
type Binary struct {
	// Path is where the file can be opened now, from sprof's own mount
	// namespace: often /proc/PID/map_files/... or /proc/PID/root/..., so
	// files inside containers and deleted files still work.
	Path string
	// Name is the path as the profiled process sees it (for messages and
	// for finding separate debug files by .gnu_debuglink).
	Name string
	// BuildID is the GNU build ID in lower-case hex, "" when the file has
	// none. Caches are keyed by it.
	BuildID string
}

// Symbolizer resolves an address in a user-space binary.
type Symbolizer interface {
	// Symbolize appends to dst the frames for the instruction at file
	// offset off of b — innermost inline level first — and returns the
	// extended slice. It appends nothing, without error, when no symbol
	// covers the address; an error means b could not be read at all.
	Symbolize(dst []stacks.Frame, b Binary, off uint64) ([]stacks.Frame, error)
}
