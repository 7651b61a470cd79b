package unwind

import "fmt"

// Method is how a frame of a user stack was found.
type Method uint8

// Unwinding methods.
const (
	MethodSFrame       Method = iota // the binary's .sframe section
	MethodEHFrame                    // rules synthesized from .eh_frame/.debug_frame
	MethodFramePointer               // frame-pointer rule in userspace
	MethodBPF                        // the BPF program's frame-pointer walk
	NumMethods
)

var methodNames = [NumMethods]string{"sframe", "eh_frame", "frame pointer", "bpf-fp"}

func (m Method) String() string {
	if m < NumMethods {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}
