package cbf

// AppendLimited appends to dst at most limit entries standing for frames,
// as Swift's LimitSequence does: a stack of N > limit frames keeps its
// first limit-top-1 frames, then one Omit frame for the N-(limit-1) frames
// left out, then its last top frames. With top = 0 it keeps the first
// limit-1 frames and ends with a Truncated frame instead. Keeping the
// outermost frames as well as the innermost ones matters for deep
// recursion: the root of the stack still says which thread it was.
func AppendLimited(dst, frames []Frame, limit, top int) []Frame {
	n := len(frames)
	if n <= limit {
		return append(dst, frames...)
	}
	limit = max(limit, 1)
	top = min(max(top, 0), limit-1)
	if top == 0 {
		dst = append(dst, frames[:limit-1]...)
		return append(dst, Frame{Kind: Truncated})
	}
	dst = append(dst, frames[:limit-top-1]...)
	dst = append(dst, Frame{Kind: Omit, Omitted: uint64(n - (limit - 1))})
	return append(dst, frames[n-top:]...)
}
