package sframe

import (
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by errors about valid SFrame constructs this
// package does not model, such as the s390x ABI.
var ErrUnsupported = errors.New("unsupported")

// FormatError reports malformed SFrame data: where (the byte offset in the
// section) and which field.
type FormatError struct {
	Off   int64  // byte offset in the section
	Field string // e.g. "header.num_fdes", "fde[3].func_size"
	Msg   string
	Err   error // ErrUnsupported or nil
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("sframe: %s at offset %#x: %s", e.Field, e.Off, e.Msg)
}

func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(off uint64, field, format string, args ...any) *FormatError {
	return &FormatError{Off: int64(off), Field: field, Msg: fmt.Sprintf(format, args...)}
}

func unsupportedErr(off uint64, field, format string, args ...any) *FormatError {
	e := formatErr(off, field, format, args...)
	e.Msg += " (unsupported)"
	e.Err = ErrUnsupported
	return e
}
