//go:build linux

package fastpath

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/policy"
)

// memlock is the kernel's own account of map m's memory: the memlock line
// of its fdinfo (the map's mem_usage on kernels since 6.4).
func memlock(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no memlock in map %v's fdinfo", m)
	return 0
}

// TestMapMemory: MapMemory's estimate, from the collection's map specs,
// against the kernel's own account of the maps a loaded program holds
// (every map of the collection and each limit rule's two flow maps), for one
// and for three limit rules of various max-flows: within 10 % (the tries
// are counted full, the kernel counts them as filled). CheckMapMemory
// refuses max-flows 4 194 304 with one line naming the rule, and takes the
// default.
func TestMapMemory(t *testing.T) {
	rule := func(name string, flows int) policy.Rule {
		return policy.Rule{Name: name, PPS: ptr(10.0), Burst: ptr(5.0), MaxFlows: ptr(flows), Match: &policy.Match{Proto: []string{"udp"}}}
	}
	for _, rules := range [][]policy.Rule{
		{rule("a", 65536)},
		{rule("a", 100000), rule("b", 1000), rule("c", 300000)},
	} {
		s, _, err := Compile(&policy.File{Rules: rules}, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		est, err := MapMemory(s)
		if err != nil {
			t.Fatal(err)
		}
		p := needKernel(t, s)
		var kern uint64
		v := reflect.ValueOf(&p.objs.fastpathMaps).Elem()
		for i := range v.NumField() {
			if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
				kern += memlock(t, m)
			}
		}
		for _, m := range append(append([]*ebpf.Map(nil), p.tables...), p.news...) {
			if m != nil {
				kern += memlock(t, m)
			}
		}
		t.Logf("%d limit rules: estimate %.2f MiB, the kernel's memlock %.2f MiB", len(rules), float64(est)/(1<<20), float64(kern)/(1<<20))
		if d := float64(est) - float64(kern); d > 0.1*float64(kern) || d < -0.1*float64(kern) {
			t.Errorf("%d limit rules: estimate %d bytes, the kernel says %d: over 10 %% apart", len(rules), est, kern)
		}
	}
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{rule("big", 4194304)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := CheckMapMemory(s); err == nil || !strings.Contains(err.Error(), `rule "big" alone has max-flows 4194304`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("CheckMapMemory of max-flows 4194304: %d bytes, %v; want one line naming rule big", b, err)
	}
	s, _, _ = Compile(&policy.File{Rules: []policy.Rule{rule("a", 65536)}}, policy.Options{})
	if _, err := CheckMapMemory(s); err != nil {
		t.Errorf("CheckMapMemory of the default max-flows: %v", err)
	}
}
