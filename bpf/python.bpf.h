// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The Python part of a sample: CPython's own call stack, read at sample
 * time. CPython keeps it on the heap as a chain of frames, from the
 * current frame of the sampled thread's PyThreadState to the first frame
 * the thread ran: _PyInterpreterFrames from 3.11, PyFrameObjects in 3.9
 * and 3.10. A native walk sees only the _PyEval_EvalFrameDefault calls
 * that run them. User space names the frames (package symbolize/cpython)
 * and splices them into the native stack at those calls.
 *
 * Included by sprof.bpf.c, whose finish() calls python_frames() before the
 * stack copy, on every path (sample, sample_compat, walk_compat,
 * table_compat): it needs no helper newer than Linux 5.10 and only bounded
 * loops. The verifier checks the loop once per turn, which is most of what
 * it checks in sample (~47,000 of ~61,000 instructions on this project's
 * 6.18 host): finish() is called from one place in each program.
 *
 * Record: with SAMPLE_PYTHON, the user frames are followed by one word,
 * the Python frame count in bits 0-15 and PY_* flags above, and then two
 * words per frame, leaf first: the code object's address, with
 * PY_FRAME_ENTRY in bit 0 on the first frame its _PyEval_EvalFrameDefault
 * call ran (every frame in 3.9 and 3.10), and the address of the frame's
 * instruction (3.11 and later) or its f_lasti (3.9, 3.10). Then the stack
 * copy, if any.
 *
 * The process may be hostile: every read is a checked user read, the
 * chain is followed at most PY_MAX_FRAMES frames (a cycle ends there), the
 * thread list at most PY_MAX_THREADS threads, and a read that fails ends
 * the Python part marked PY_TRUNCATED.
 */

enum python_limits {
	PY_MAX_FRAMES = 128,
	PY_MAX_THREADS = 64,
	/* Bytes of each frame read at once (py_proc.frame_read) at most:
	 * every frame field sprof uses lies in the first 80 bytes of a
	 * _PyInterpreterFrame (3.11 to 3.13) and the first 112 of a
	 * PyFrameObject (3.9, 3.10). Offsets are masked with PY_FIELD_MASK,
	 * and the buffer is large enough for any masked one. */
	PY_FRAME_READ_MAX = 128,
	PY_FIELD_MASK = 0x7f,
	PY_FRAME_BUF = 256,
};

enum python_flag {
	/* The chain did not end at its first frame: a read failed (that of
	 * the thread state or of its current frame too: then no frame is
	 * known), or the walk stopped at PY_MAX_FRAMES. */
	PY_TRUNCATED = 1 << 16,
	/* The sampled thread has no PyThreadState (not a Python thread, or
	 * one beyond PY_MAX_THREADS). */
	PY_NO_THREAD = 1 << 17,
	/* The record had no room left for the frames. */
	PY_NO_ROOM = 1 << 18,
	/* The innermost frame's code object is not in py_named: user space
	 * tells the sampler once it has named it, or tried to. */
	PY_FRESH = 1 << 19,
};

#define PY_FRAME_ENTRY 1ULL
#define PY_NO_FIELD 0xffff

/* Where one process's interpreter keeps what the walk reads: byte offsets
 * into its structures (cpython.Layout), set by user space. */
struct py_proc {
	__u64 interp_head; /* address of _PyRuntime.interpreters.head */
	__u16 interp_threads_head;
	__u16 thread_next;
	__u16 thread_native_id;
	__u16 thread_frame;
	__u16 cframe_frame; /* PY_NO_FIELD: thread_frame is the frame */
	__u16 frame_previous;
	__u16 frame_code;
	__u16 frame_instr;
	__u16 frame_owner;
	__u16 frame_is_entry; /* 3.11; PY_NO_FIELD later */
	/* 3.9, 3.10: thread_native_id is the thread's pthread_t, and the
	 * kernel's id is this far into the struct pthread it points to;
	 * PY_NO_FIELD otherwise. */
	__u16 pthread_tid;
	__u8 owned_by_cstack; /* 3.12+: the owner of a C-stack shim frame */
	/* 3.9, 3.10: frames are PyFrameObjects, each run by a call of its
	 * own, and frame_instr is f_lasti, a 32-bit index. */
	__u8 frame_objects;
	__u8 frame_read; /* bytes of each frame read, <= PY_FRAME_READ_MAX */
	__u8 pad[1];
};

volatile const bool python_enabled;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct py_proc);
} python_procs SEC(".maps");

/* The code objects of each process that user space has named, or tried
 * to (Sampler.PythonNamed): a sample whose innermost Python frame runs one
 * it has not is marked PY_FRESH and wakes the reader (WAKE_SOON_NS in
 * sprof.bpf.c), and the drain then names every frame of the samples it
 * reads and tells the sampler of the fresh ones. Only the innermost, for
 * one lookup a sample: a new function is innermost in the samples of its
 * own code, between its calls; one that only ever waits in callees
 * already named wakes nothing, and may go unnamed if its process exits
 * before the next drain. The least recently used go when it is full: run
 * again, they are marked fresh again and told again, so a host running
 * more hot functions than the map holds wakes the reader as often as
 * WAKE_SOON_NS allows. A process's entries outlive it: a new program
 * under the same pid whose code object lies where one named before lay
 * (address randomization makes that rare) wakes nothing for it. Sized by
 * the loader (1 without Python). */
struct py_code_key {
	__u32 pid;
	__u32 pad;
	__u64 code;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct py_code_key);
	__type(value, __u8);
} py_named SEC(".maps");

/* A thread's PyThreadState, found by walking the interpreter's thread
 * list for the one whose native_thread_id is the thread's, and checked on
 * every use. A thread with none is remembered with the list's head it was
 * looked for under: new thread states go at the head, so the list must
 * change before the thread can have one. */
struct py_thread {
	__u64 tstate;
	__u64 head;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* The walk's state, in map memory for the verifier's sake, as the
 * frame-pointer walk's (struct fp_walk): each step then starts from the
 * same unknown values and the bounded loop is checked in one pass per
 * iteration, not once per path through the earlier ones. */
struct py_walk {
	__u64 frame; /* next frame to read */
	__u64 flags; /* PY_* */
	__u32 at;    /* next free slot in rec.frames */
	__u32 n;     /* frames written */
	__u64 innermost; /* the first frame's code object (0: none) */
	__u8 b[PY_FRAME_BUF]; /* the frame read */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_walk);
} py_walks SEC(".maps");

static __always_inline __u64 py_word(struct py_walk *w, __u16 off)
{
	return *(__u64 *)&w->b[off & PY_FIELD_MASK];
}

/* The kernel's id of the thread whose PyThreadState is ts, in *tid; false
 * when it cannot be read. */
static __always_inline bool py_thread_tid(struct py_proc *p, __u64 ts, __u64 *tid)
{
	__u32 pthread_tid = 0;

	if (bpf_probe_read_user(tid, sizeof(*tid), (void *)(ts + p->thread_native_id)))
		return false;
	if (p->pthread_tid == PY_NO_FIELD)
		return true;
	if (bpf_probe_read_user(&pthread_tid, sizeof(pthread_tid), (void *)(*tid + p->pthread_tid)))
		return false;
	*tid = pthread_tid;
	return true;
}

/* The sampled thread's PyThreadState in *tstate, 0 when it has none; false
 * when a read failed, which is not remembered: the next sample looks
 * again. */
static __always_inline bool py_thread_state(struct py_proc *p, __u64 id, __u64 *tstate)
{
	struct py_thread *known = bpf_map_lookup_elem(&py_threads, &id), found = {};
	__u64 interp = 0, ts = 0, tid = 0, want = (__u32)id;

	*tstate = 0;
	if (known && known->tstate && py_thread_tid(p, known->tstate, &tid) && tid == want) {
		*tstate = known->tstate;
		return true;
	}
	if (bpf_probe_read_user(&interp, sizeof(interp), (void *)p->interp_head))
		return false;
	if (!interp)
		return true; /* no interpreter yet */
	if (bpf_probe_read_user(&found.head, sizeof(found.head), (void *)(interp + p->interp_threads_head)))
		return false;
	if (known && !known->tstate && known->head == found.head)
		return true;
	ts = found.head;
	for (int i = 0; i < PY_MAX_THREADS && ts; i++) {
		if (!py_thread_tid(p, ts, &tid))
			return false;
		if (tid == want) {
			found.tstate = ts;
			break;
		}
		if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(ts + p->thread_next)))
			return false;
	}
	bpf_map_update_elem(&py_threads, &id, &found, BPF_ANY);
	*tstate = found.tstate;
	return true;
}

/* The thread's current frame in *frame, 0 when it runs none; false when
 * a read failed. */
static __always_inline bool py_current_frame(struct py_proc *p, __u64 ts, __u64 *frame)
{
	__u64 at = 0;

	if (bpf_probe_read_user(&at, sizeof(at), (void *)(ts + p->thread_frame)))
		return false;
	if (p->cframe_frame != PY_NO_FIELD && at &&
	    bpf_probe_read_user(&at, sizeof(at), (void *)(at + p->cframe_frame)))
		return false;
	*frame = at;
	return true;
}

/* One frame of the chain: true when the walk ends. */
static __always_inline bool py_step(struct scratch_value *s, struct py_proc *p, struct py_walk *w)
{
	__u64 frame = w->frame, code;
	__u32 at = w->at, last;

	if (!frame)
		return true;
	if (bpf_probe_read_user(w->b, p->frame_read & (PY_FRAME_BUF - 1), (void *)frame)) {
		w->flags |= PY_TRUNCATED;
		return true;
	}
	w->frame = py_word(w, p->frame_previous);
	if (p->frame_owner != PY_NO_FIELD && p->frame_is_entry == PY_NO_FIELD &&
	    w->b[p->frame_owner & PY_FIELD_MASK] == p->owned_by_cstack) {
		/* 3.12+: the shim frame of a _PyEval_EvalFrameDefault call;
		 * the frame before it was the call's first. */
		last = at - 2;
		if (w->n && last < MAX_FRAMES)
			s->rec.frames[last] |= PY_FRAME_ENTRY;
		return false;
	}
	if (at >= MAX_FRAMES - 1) {
		w->flags |= PY_NO_ROOM | PY_TRUNCATED;
		return true;
	}
	code = py_word(w, p->frame_code) & ~PY_FRAME_ENTRY;
	if (!w->n)
		w->innermost = code;
	if (p->frame_objects || (p->frame_is_entry != PY_NO_FIELD && w->b[p->frame_is_entry & PY_FIELD_MASK]))
		code |= PY_FRAME_ENTRY;
	s->rec.frames[at] = code;
	s->rec.frames[at + 1] = p->frame_objects ? (__u32)py_word(w, p->frame_instr) : py_word(w, p->frame_instr);
	w->at = at + 2;
	w->n++;
	return false;
}

static __always_inline void python_frames(struct scratch_value *s)
{
	struct sample_header *h = &s->rec.hdr;
	__u32 tgid = h->pid, zero = 0, head = s->walk.at;
	struct py_proc *p;
	struct py_walk *w;
	struct py_code_key named = {};
	__u64 ts = 0;
	int i;

	s->walk.py_fresh = 0;
	if (!python_enabled || !capture_user || !h->pc || !(marks_of(tgid) & MARK_PYTHON))
		return;
	p = bpf_map_lookup_elem(&python_procs, &tgid);
	w = bpf_map_lookup_elem(&py_walks, &zero);
	if (!p || !w || head >= MAX_FRAMES)
		return;
	w->at = head + 1;
	w->n = 0;
	w->innermost = 0;
	w->flags = 0;
	w->frame = 0;
	if (!py_thread_state(p, bpf_get_current_pid_tgid(), &ts) || (ts && !py_current_frame(p, ts, &w->frame)))
		w->flags = PY_TRUNCATED; /* the thread's frames, if any, are unknown */
	else if (!ts)
		w->flags = PY_NO_THREAD;
#pragma clang loop unroll(disable)
	for (i = 0; i < PY_MAX_FRAMES; i++)
		if (py_step(s, p, w))
			break;
	if (i == PY_MAX_FRAMES && w->frame)
		w->flags |= PY_TRUNCATED;
	if (w->innermost) {
		named.pid = tgid;
		named.code = w->innermost;
		if (!bpf_map_lookup_elem(&py_named, &named)) {
			s->walk.py_fresh = true;
			w->flags |= PY_FRESH;
		}
	}
	/* head was checked above, but across the loop the compiler keeps it
	 * on the stack, where Linux 6.1's verifier lost its bound (with the
	 * table walk in the program): checked again, which the barrier stops
	 * the compiler from dropping. */
	barrier_var(head);
	if (head >= MAX_FRAMES)
		return;
	s->rec.frames[head] = w->n | w->flags;
	s->walk.at = w->at;
	s->walk.flags |= SAMPLE_PYTHON;
}
