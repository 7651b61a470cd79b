package gsym

import "fmt"

// ErrNotFound is returned when no function in a GSYM file covers an
// address. ErrNotInLineTable, returned when the function's line table has
// no valid row for it, matches ErrNotFound under errors.Is. Both are
// sentinels, so a lookup that finds nothing allocates nothing (a sixth of
// the addresses spread over a binary fall between functions);
// AppendLookupError prints them with the address as llvm-gsymutil does.
var (
	ErrNotFound       error = &notFoundError{"address is not in GSYM", false}
	ErrNotInLineTable error = &notFoundError{"address is not in the line table", true}
)

type notFoundError struct {
	msg         string
	inLineTable bool
}

func (e *notFoundError) Error() string { return e.msg }

// Is makes errors.Is(ErrNotInLineTable, ErrNotFound) true.
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

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
