package heap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func intLess(a, b *int) bool { return *a < *b }

// TestHeapOrder pushes, pops and fixes random values and checks every pop
// against a sorted copy.
func TestHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		h := New(intLess, 0)
		var want []int
		for i := 0; i < rng.IntN(100); i++ {
			switch rng.IntN(4) {
			case 0, 1:
				v := rng.IntN(50)
				h.Push(v)
				want = append(want, v)
			case 2:
				if h.Len() > 0 {
					slices.Sort(want)
					if got := h.Pop(); got != want[0] {
						t.Fatalf("pop %d, want %d", got, want[0])
					}
					want = want[1:]
				}
			case 3:
				if h.Len() > 0 {
					j := rng.IntN(h.Len())
					old := *h.At(j)
					v := rng.IntN(50)
					*h.At(j) = v
					h.Fix(j)
					k := slices.Index(want, old)
					want[k] = v
				}
			}
		}
		slices.Sort(want)
		for _, w := range want {
			if got := h.Pop(); got != w {
				t.Fatalf("drain: pop %d, want %d", got, w)
			}
		}
		if h.Len() != 0 {
			t.Fatalf("left %d", h.Len())
		}
	}
}

// TestHeapPopClears checks a popped slot keeps no pointer.
func TestHeapPopClears(t *testing.T) {
	h := New(func(a, b **int) bool { return **a < **b }, 4)
	x, y := 1, 2
	h.Push(&x)
	h.Push(&y)
	h.Pop()
	h.Pop()
	if s := h.Items()[:2]; s[0] != nil || s[1] != nil {
		t.Fatal("popped slots still hold pointers")
	}
}

// TestHeapNoAlloc: push and pop on a heap of settled size allocate nothing.
func TestHeapNoAlloc(t *testing.T) {
	h := New(intLess, 64)
	if h.Cap() != 64 || h.Len() != 0 {
		t.Fatalf("cap %d len %d", h.Cap(), h.Len())
	}
	v := 0
	if a := testing.AllocsPerRun(1000, func() {
		for i := 0; i < 32; i++ {
			v = (v*7 + 3) % 101
			h.Push(v)
		}
		for h.Len() > 0 {
			h.Pop()
		}
	}); a != 0 {
		t.Fatalf("%v allocations per run, want 0", a)
	}
}

func BenchmarkHeapPushPop(b *testing.B) {
	h := New(intLess, 1024)
	for i := 0; i < 1000; i++ {
		h.Push(i * 7919 % 1000)
	}
	b.ReportAllocs()
	v := 0
	for b.Loop() {
		v = (v*7 + 3) % 1000
		h.Push(v)
		h.Pop()
	}
}
