// Package cpython names the Python functions an unmodified CPython
// interpreter runs, for a profiler that samples it from outside.
//
// CPython keeps its call stack on the heap, not on the machine stack: a
// native walk of a Python program shows only the interpreter's
// _PyEval_EvalFrameDefault frames. Versions 3.9 to 3.13 are read. sprof's BPF sampler reads the
// interpreter's own frame chain at sample time (bpf/python.bpf.h) and
// records, per Python frame, the address of its code object and of the
// instruction it runs. This package does the rest in user space:
//
//   - Detect recognises a Python process by its mappings (libpython3.X.so
//     or a python3.X executable) and finds, in that file's symbol table,
//     _PyRuntime (where the sampler starts), _PyEval_EvalFrameDefault (where
//     Python frames are spliced into the native stack) and PyCode_Type
//     (which every code object read must point to). 3.9 and 3.10 name a
//     thread by its pthread_t only (PyThreadState.thread_id): Detect also
//     reads, from the glibc the process maps, where struct pthread keeps
//     the kernel's thread id (glibc publishes it for debuggers as
//     _thread_db_pthread_tid); without glibc (musl) they are not read.
//   - Layout says where the fields the sampler and the code reader use lie
//     in the interpreter's structures. Its source, by version:
//     3.13 and later publish them in the process itself, in the
//     _Py_DebugOffsets at the start of _PyRuntime, which Detect reads from
//     the process's memory (its cookie and version checked); 3.9 to 3.12
//     use a table in this package (layout.go), checked against the DWARF of
//     the interpreters installed on the test machine (Debian's python3.11-dbg
//     and pyenv builds) by TestLayoutsMatchDWARF. Nothing is derived from
//     DWARF on the user's host. 3.9 and 3.10 keep frames as PyFrameObjects,
//     each run by a _PyEval_EvalFrameDefault call of its own, and record a
//     frame's instruction as an index (f_lasti), not an address. 3.8 and
//     older, 3.14 and free-threaded builds are not read: their processes
//     are profiled natively.
//   - Reader reads code objects from /proc/PID/mem, bounded, checking each
//     object's type, and turns (code object, instruction) into function
//     (co_qualname; co_name before 3.11), file (co_filename) and line (from
//     co_lnotab in 3.9, co_linetable later, each version's format its own),
//     cached per code object.
//   - Splice puts Python frames into a native stack, each run of Python
//     frames that one _PyEval_EvalFrameDefault call executes at that call's
//     frame.
//
// The process is not trusted: its memory may be garbage or hostile. Every
// read is bounded (names at MaxString bytes, line tables at MaxLineTable),
// objects are checked by type before use, a line table that does not parse
// gives no line rather than an error, and a chain the sampler could not
// follow arrives marked truncated and is shown so.
package cpython
