package gsym

// What the external tests (package gsym_test, which can import
// internal/gsymbench) use of the package's internals.

// LLVMFiles are the fixtures llvm-gsymutil-22 wrote, in Fixtures.
var LLVMFiles = llvmFiles

// Fixtures is the directory of the GSYM fixtures.
const Fixtures = fixtures

// SetPromote sets the lookups of a function after which r decodes it
// into its cache: 1 decodes every function at its first lookup.
func (r *Reader) SetPromote(n uint32) { r.cache.promote = n }
