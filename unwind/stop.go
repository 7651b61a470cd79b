package unwind

import (
	"fmt"

	"github.com/sprof/sprof/sframe"
)

// Stop says why an unwind ended.
type Stop uint8

// Reasons an unwind stops. Only Outermost leaves a whole stack.
const (
	// Outermost: the outermost frame was reached (RA undefined, a return
	// address or saved frame pointer of 0).
	Outermost Stop = iota + 1
	// Unmapped: a return address lies in no executable mapping of the
	// process; it is not a frame.
	Unmapped
	// NoRule: the PC's binary has a table without a rule for it (a gap,
	// most often a row the CFI could not express), and no frame pointers.
	NoRule
	// ReadFault: a read outside the stack copy.
	ReadFault
	// CFANotIncreasing: the caller's CFA is not above the stack pointer,
	// so the unwind would not progress (a loop or corruption).
	CFANotIncreasing
	// BadCFA: the CFA is misaligned, or FP-based with FP below SP.
	BadCFA
	// UnknownRegister: a rule needs a register outside the topmost frame,
	// where it is not known (aarch64's link register).
	UnknownRegister
	// SignalFrame: a signal trampoline, which SFrame cannot unwind.
	SignalFrame
	// DepthLimit: the deepest stack unwound was reached.
	DepthLimit
	// NoTable: the PC's binary has no unwind table and no frame pointers.
	NoTable
	// TablePending: the PC's binary's table was still being built when
	// the sample could wait no longer.
	TablePending
	// NumStops sizes arrays indexed by Stop.
	NumStops
)

var stopNames = [NumStops]string{
	Outermost:        "outermost frame",
	Unmapped:         "no mapping for PC",
	NoRule:           "no rule for PC (unsupported or missing CFI)",
	ReadFault:        "read outside the stack copy",
	CFANotIncreasing: "CFA does not increase",
	BadCFA:           "bad CFA",
	UnknownRegister:  "register unknown outside topmost frame",
	SignalFrame:      "signal frame",
	DepthLimit:       "depth limit",
	NoTable:          "no unwind table",
	TablePending:     "table still being built (sample flushed)",
}

func (s Stop) String() string {
	if s < NumStops && stopNames[s] != "" {
		return stopNames[s]
	}
	return fmt.Sprintf("Stop(%d)", uint8(s))
}

// Truncated says the stack an unwind left is not whole: every stop but
// the outermost frame.
func (s Stop) Truncated() bool { return s != Outermost }

// fromSFrame maps an sframe.Unwinder's stop reasons to Stops.
var fromSFrame = [...]Stop{
	sframe.StopOutermost:        Outermost,
	sframe.StopNoMapping:        Unmapped,
	sframe.StopNoRule:           NoRule,
	sframe.StopReadFault:        ReadFault,
	sframe.StopCFANotIncreasing: CFANotIncreasing,
	sframe.StopBadCFA:           BadCFA,
	sframe.StopLinkRegister:     UnknownRegister,
	sframe.StopSignalFrame:      SignalFrame,
	sframe.StopFull:             DepthLimit,
}

// FromSFrame returns the Stop of an sframe.Unwinder's stop reason; one
// this package does not know is Stop(0), which is not whole either.
func FromSFrame(r sframe.StopReason) Stop {
	if int(r) < len(fromSFrame) {
		return fromSFrame[r]
	}
	return 0
}
