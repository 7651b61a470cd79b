// Package gz gzips payloads with writers kept for reuse. A new
// gzip.Writer allocates about 800 KB of compressor state before it writes
// a byte; the agent, which compresses a profile per service per interval
// for each destination, spent more on those than on everything else it
// allocates (BenchmarkCompress).
package gz

import (
	"bytes"
	"compress/gzip"
	"io"
	"sync"
)

// A Compressor gzips at the default level, as gzip.NewWriter does, with
// writers it keeps between calls. Its zero value is ready to use; it is
// safe for concurrent use, and a long-lived caller keeps one.
type Compressor struct {
	writers sync.Pool // of *gzip.Writer
}

// Write writes b to w, gzip-compressed.
func (c *Compressor) Write(w io.Writer, b []byte) error {
	zw, _ := c.writers.Get().(*gzip.Writer)
	if zw == nil {
		zw = gzip.NewWriter(w)
	} else {
		zw.Reset(w)
	}
	_, err := zw.Write(b)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	zw.Reset(io.Discard) // let go of w
	c.writers.Put(zw)
	return err
}

// Bytes returns b gzip-compressed.
func (c *Compressor) Bytes(b []byte) []byte {
	var buf bytes.Buffer
	c.Write(&buf, b) // writes to a bytes.Buffer cannot fail
	return buf.Bytes()
}
