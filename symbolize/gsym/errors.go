package gsym

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned (wrapped in an *AddressError) when no function in
// a GSYM file covers an address, or when the function's line table has no
// row for it. Callers test it with errors.Is.
var ErrNotFound = errors.New("address not found")

// AddressError reports an address that a lookup could not resolve. Its
// message is the one llvm-gsymutil prints, so sprof's output can be compared
// with LLVM's byte for byte.
type AddressError struct {
	Addr uint64
	// InLineTable is set when a function covers Addr but its line table
	// has no valid row for it.
	InLineTable bool
}

func (e *AddressError) Error() string {
	if e.InLineTable {
		return fmt.Sprintf("address 0x%x is not in the line table", e.Addr)
	}
	return fmt.Sprintf("address 0x%x is not in GSYM", e.Addr)
}

// Is makes errors.Is(err, ErrNotFound) true for address errors.
func (e *AddressError) Is(target error) bool { return target == ErrNotFound }

// FormatError is a malformed GSYM file: it names the byte offset (from the
// start of the file) and the field that could not be read, as debug/elf's
// FormatError does.
type FormatError struct {
	Off   uint64
	Field string
	Msg   string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gsym: %s at offset %#x: %s", e.Field, e.Off, e.Msg)
}

func formatErr(off uint64, field, format string, args ...any) *FormatError {
	return &FormatError{Off: off, Field: field, Msg: fmt.Sprintf(format, args...)}
}
