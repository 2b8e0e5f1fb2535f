package scheduler

// tree is a segment tree over node positions holding, for every subtree,
// the largest free CPU, memory and GPU count of any node in it (each
// dimension on its own). A search descends only into subtrees whose maxima
// all reach the demand, so finding the first nodes that fit costs about
// log(nodes) when the maxima are not misleading, and an update costs
// log(nodes).
type tree struct {
	leaves int // a power of two
	cpu    []int64
	mem    []int64
	gpu    []int
}

// unavailable is the value of a leaf no demand fits: padding, and reserved
// nodes. Demands are never negative.
var unavailable = Resources{MilliCPU: -1, Memory: -1, GPUs: -1}

func newTree(n int) *tree {
	leaves := 1
	for leaves < n {
		leaves *= 2
	}
	t := &tree{leaves: leaves, cpu: make([]int64, 2*leaves), mem: make([]int64, 2*leaves), gpu: make([]int, 2*leaves)}
	for i := range t.cpu {
		t.cpu[i], t.mem[i], t.gpu[i] = -1, -1, -1
	}
	return t
}

// setLeaf sets a leaf without updating its ancestors; call build after the
// last one.
func (t *tree) setLeaf(pos int, r Resources) {
	i := t.leaves + pos
	t.cpu[i], t.mem[i], t.gpu[i] = r.MilliCPU, r.Memory, r.GPUs
}

func (t *tree) build() {
	for i := t.leaves - 1; i >= 1; i-- {
		t.pull(i)
	}
}

func (t *tree) pull(i int) {
	l, r := 2*i, 2*i+1
	t.cpu[i] = max(t.cpu[l], t.cpu[r])
	t.mem[i] = max(t.mem[l], t.mem[r])
	t.gpu[i] = max(t.gpu[l], t.gpu[r])
}

// set changes one leaf and the maxima above it.
func (t *tree) set(pos int, r Resources) {
	t.setLeaf(pos, r)
	for i := (t.leaves + pos) / 2; i >= 1; i /= 2 {
		t.pull(i)
	}
}

func (t *tree) leaf(pos int) Resources {
	i := t.leaves + pos
	return Resources{MilliCPU: t.cpu[i], Memory: t.mem[i], GPUs: t.gpu[i]}
}

// root is the per-dimension maximum over all leaves.
func (t *tree) root() Resources { return t.leaf(1 - t.leaves) }

// collect appends to out the first n positions, in order, whose leaf fits d,
// or all of them if there are fewer.
func (t *tree) collect(d Resources, n int, out []int32) []int32 {
	stop := len(out) + n
	return t.walk(1, d, stop, out)
}

func (t *tree) walk(i int, d Resources, stop int, out []int32) []int32 {
	if len(out) >= stop || t.cpu[i] < d.MilliCPU || t.mem[i] < d.Memory || t.gpu[i] < d.GPUs {
		return out
	}
	if i >= t.leaves {
		return append(out, int32(i-t.leaves))
	}
	out = t.walk(2*i, d, stop, out)
	return t.walk(2*i+1, d, stop, out)
}
