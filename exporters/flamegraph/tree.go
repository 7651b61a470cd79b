package flamegraph

import "strconv"

// Kind is what a frame stands for; it selects the frame's colour.
type Kind uint8

const (
	// User is a symbolized function of a user-space program.
	User Kind = iota
	// Kernel is a kernel function or kernel address.
	Kernel
	// Inlined is a function the compiler inlined into its caller.
	Inlined
	// Unsymbolized is an address no symbol covers, shown by a placeholder.
	Unsymbolized
	// Synthetic is a frame the profiler added, such as a process name or
	// a marker for a truncated stack.
	Synthetic
	// JIT is a function a runtime compiled at run time (JavaScript, Java),
	// named from its perf map or jitdump.
	JIT
	// Python is a Python function run by CPython, named from the
	// interpreter's code objects.
	Python
)

var kindNames = [...]string{User: "user", Kernel: "kernel", Inlined: "inlined",
	Unsymbolized: "unsymbolized", Synthetic: "synthetic", JIT: "jit", Python: "python"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Frame is one level of a stack.
type Frame struct {
	Name string
	Kind Kind
}

// Tree merges stacks into a prefix tree: frames with the same name and
// kind under the same parent become one node whose count is the sum.
type Tree struct {
	// nodes[0] is the root, the "all" frame.
	nodes []node
	// child finds a node by its parent and frame.
	child map[childKey]int32
}

type node struct {
	frame    Frame
	count    int64
	children []int32
}

type childKey struct {
	parent int32
	frame  Frame
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	return &Tree{nodes: []node{{frame: Frame{Name: "all", Kind: Synthetic}}}, child: map[childKey]int32{}}
}

// Add adds count samples of stack, given root first. Counts below one are
// ignored.
func (t *Tree) Add(stack []Frame, count int64) {
	if count <= 0 {
		return
	}
	cur := int32(0)
	t.nodes[0].count += count
	for _, f := range stack {
		k := childKey{cur, f}
		next, ok := t.child[k]
		if !ok {
			next = int32(len(t.nodes))
			t.nodes = append(t.nodes, node{frame: f})
			t.nodes[cur].children = append(t.nodes[cur].children, next)
			t.child[k] = next
		}
		t.nodes[next].count += count
		cur = next
	}
}

// Total is the number of samples added.
func (t *Tree) Total() int64 { return t.nodes[0].count }
