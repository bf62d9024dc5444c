// Package heap is the project's one binary heap: a min-heap of T ordered
// by a less func, on a slice that it grows only when full, so that pushes
// and pops on a heap of settled size allocate nothing.
//
// It is a leaf utility package: it imports nothing of ours, so any package
// may use it (even those whose imports are otherwise restricted, such as
// shaper, which imports only flows and leaf packages under internal/).
package heap

// Heap is a binary min-heap by less: Top is an element no other is less
// than. The zero value is not usable; make one with New.
type Heap[T any] struct {
	s    []T
	less func(a, b *T) bool
}

// New returns an empty heap ordered by less, with room for capacity
// elements before it allocates.
func New[T any](less func(a, b *T) bool, capacity int) Heap[T] {
	return Heap[T]{s: make([]T, 0, capacity), less: less}
}

// Len is the number of elements held.
func (h *Heap[T]) Len() int { return len(h.s) }

// Cap is how many elements the heap holds before Push allocates.
func (h *Heap[T]) Cap() int { return cap(h.s) }

// Top is the least element; the heap must not be empty. The caller may
// change it, then call Fix(0).
func (h *Heap[T]) Top() *T { return &h.s[0] }

// At is the i-th element of the backing array (in no particular order),
// 0 <= i < Len; after changing it call Fix(i).
func (h *Heap[T]) At(i int) *T { return &h.s[i] }

// Items is the backing array, in heap order; it is valid until the next
// change. The caller may reorder it only if it then stops using the heap
// or calls Reset.
func (h *Heap[T]) Items() []T { return h.s }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.s = append(h.s, x)
	h.up(len(h.s) - 1)
}

// Pop removes and returns the least element; the heap must not be empty.
// The vacated slot is zeroed, so the heap keeps no pointers it let go.
func (h *Heap[T]) Pop() T {
	n := len(h.s) - 1
	top := h.s[0]
	h.s[0] = h.s[n]
	var zero T
	h.s[n] = zero
	h.s = h.s[:n]
	if n > 0 {
		h.down(0)
	}
	return top
}

// Fix restores the order after element i changed.
func (h *Heap[T]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// Reset empties the heap, keeping its backing array.
func (h *Heap[T]) Reset() {
	clear(h.s)
	h.s = h.s[:0]
}

func (h *Heap[T]) up(i int) {
	s := h.s
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(&s[i], &s[p]) {
			return
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// down sifts element i down; it reports whether it moved.
func (h *Heap[T]) down(i0 int) bool {
	s := h.s
	n := len(s)
	i := i0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && h.less(&s[r], &s[l]) {
			l = r
		}
		if !h.less(&s[l], &s[i]) {
			break
		}
		s[i], s[l] = s[l], s[i]
		i = l
	}
	return i > i0
}
