package cfi

import (
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by errors about valid CFI this package does
// not model, such as the ancient "eh" augmentation.
var ErrUnsupported = errors.New("unsupported")

// FormatError reports malformed call frame information: where (the byte
// offset in the section) and which field.
type FormatError struct {
	Off   uint64 // byte offset in the section
	Field string // e.g. "cie.augmentation", "fde.pc_begin", "DW_CFA_def_cfa.register"
	Msg   string
	Err   error // ErrUnsupported or nil
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("cfi: %s at offset %#x: %s", e.Field, e.Off, e.Msg)
}

func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(off uint64, field, format string, args ...any) *FormatError {
	return &FormatError{Off: off, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func unsupportedErr(off uint64, field, format string, args ...any) *FormatError {
	e := formatErr(off, field, format, args...)
	e.Msg += " (unsupported)"
	e.Err = ErrUnsupported
	return e
}
