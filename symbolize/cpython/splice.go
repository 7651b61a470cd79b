package cpython

// FrameTag marks a Python frame in a spliced stack: the frame's address
// there is that of its instruction with this bit set, which no native code
// address has (user space ends below 2^56), so that each distinct
// instruction is its own location, like a native return address.
const FrameTag = 1 << 63

// IsFrame reports whether addr in a spliced stack is a Python frame.
func IsFrame(addr uint64) bool { return addr&FrameTag != 0 }

// EntryFlag is set in the code word of a sampled frame that is the first
// its _PyEval_EvalFrameDefault call ran (PY_FRAME_ENTRY in
// bpf/python.bpf.h): the frames from the previous entry frame (or the
// leaf) to it, leaf first, belong to one native evaluator frame.
const EntryFlag = 1

// Sampled is one Python frame as the sampler records it: the code
// object's address, with EntryFlag in its low bit (objects are 8-byte
// aligned), and the instruction's address.
type Sampled struct{ Code, Instr uint64 }

// Entry reports whether the frame is the first its evaluator call ran.
func (s Sampled) Entry() bool { return s.Code&EntryFlag != 0 }

// CodeAddr is the code object's address.
func (s Sampled) CodeAddr() uint64 { return s.Code &^ EntryFlag }

// Addr is the frame's address in a spliced stack.
func (s Sampled) Addr() uint64 { return s.Instr | FrameTag }

// Splice appends to dst the native user stack (leaf first, native[0] the
// sampled pc, the rest return addresses) with the Python frames py (leaf
// first) put in: the frames each _PyEval_EvalFrameDefault call runs go
// just leafward of that call's native frame, as its callees. Evaluator
// frames are matched to runs of Python frames from the leaf. Python frames
// left over, where the native stack ends early (a truncated or failed
// unwind), go at its root end, so the Python chain stays whole.
func (p *Process) Splice(dst, native []uint64, py []Sampled) []uint64 {
	next := 0 // first Python frame not yet placed
	for i, addr := range native {
		if next < len(py) && p.InEval(addr, i > 0) {
			for next < len(py) {
				f := py[next]
				next++
				dst = append(dst, f.Addr())
				if f.Entry() {
					break
				}
			}
		}
		dst = append(dst, addr)
	}
	for _, f := range py[next:] {
		dst = append(dst, f.Addr())
	}
	return dst
}
