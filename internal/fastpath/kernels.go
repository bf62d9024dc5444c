//go:build linux

package fastpath

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The first Linux release of each helper and map type the program may
// use (the kernel's bpf features by version; the helpers' and maps' names
// as cilium/ebpf spells them). A helper or map missing here is reported
// as of unknown version.
var (
	helperSince = map[asm.BuiltinFunc]kver{
		asm.FnMapLookupElem: {3, 19}, asm.FnMapUpdateElem: {3, 19}, asm.FnMapDeleteElem: {3, 19},
		asm.FnKtimeGetNs: {4, 1}, asm.FnGetSmpProcessorId: {4, 1}, asm.FnSkbLoadBytes: {4, 5},
		asm.FnSkbStoreBytes: {4, 1}, asm.FnSpinLock: {5, 1}, asm.FnSpinUnlock: {5, 1},
		asm.FnKtimeGetBootNs: {5, 8}, asm.FnLoop: {5, 17}, asm.FnKtimeGetCoarseNs: {5, 11},
		asm.FnForEachMapElem: {5, 13}, asm.FnGetPrandomU32: {4, 1}, asm.FnCsumDiff: {4, 6},
	}
	mapSince = map[ebpf.MapType]kver{
		ebpf.Array: {3, 19}, ebpf.Hash: {3, 19}, ebpf.PerCPUArray: {4, 6}, ebpf.PerCPUHash: {4, 6},
		ebpf.LRUHash: {4, 10}, ebpf.LRUCPUHash: {4, 10}, ebpf.LPMTrie: {4, 11},
		ebpf.ArrayOfMaps: {4, 12}, ebpf.HashOfMaps: {4, 12},
	}
	// tcxSince: tcx links; clsactSince: the clsact qdisc and
	// direct-action cls_bpf, what --fastpath-attach tc uses.
	tcxSince    = kver{6, 6}
	clsactSince = kver{4, 5}
)

// kver is a Linux release, major.minor.
type kver struct{ major, minor int }

func (v kver) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }
func (v kver) less(w kver) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

// need is one thing the program needs and the release that brought it.
type need struct {
	what  string
	since kver
}

// programNeeds lists what the program's collection uses, newest first:
// the helpers its instructions call and the types of its maps, read from
// the object itself (so it follows bpf/*.c).
func programNeeds() ([]need, error) {
	cs, err := loadFastpath()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []need
	add := func(what string, v kver, ok bool) {
		if seen[what] {
			return
		}
		seen[what] = true
		if !ok {
			v = kver{99, 0}
		}
		out = append(out, need{what, v})
	}
	for _, p := range cs.Programs {
		for _, ins := range p.Instructions {
			if !ins.IsBuiltinCall() {
				continue
			}
			fn, err := asm.BuiltinFuncForPlatform("linux", uint32(ins.Constant))
			if err != nil {
				continue
			}
			v, ok := helperSince[fn]
			add(helperName(fn), v, ok)
		}
	}
	for _, m := range cs.Maps {
		for _, t := range []*ebpf.MapSpec{m, m.InnerMap} {
			if t != nil {
				v, ok := mapSince[t.Type]
				add(t.Type.String()+" map", v, ok)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b need) int {
		switch {
		case b.since.less(a.since):
			return -1
		case a.since.less(b.since):
			return 1
		}
		return strings.Compare(a.what, b.what)
	})
	return out, nil
}

// KernelNeeds says in one line which Linux release each attach mode needs
// for the program as built, what it needs that older kernels lack, and
// what an older kernel loses: for `check --fastpath` and docs/fastpath.md.
func KernelNeeds() (string, error) {
	ns, err := programNeeds()
	if err != nil {
		return "", err
	}
	prog := clsactSince
	var recent, newer []string
	for _, n := range ns {
		if prog.less(n.since) {
			prog = n.since
		}
		if !n.since.less(kver{5, 0}) {
			recent = append(recent, fmt.Sprintf("%s %s", n.what, n.since))
		}
		if (kver{5, 15}).less(n.since) {
			newer = append(newer, n.what)
		}
	}
	lack := "nothing newer than 5.15"
	if len(newer) > 0 {
		lack = "newer than 5.15: " + strings.Join(newer, ", ")
	}
	return fmt.Sprintf("the program needs Linux %s (it uses %s; %s); attached by tcx from %s, by tc (clsact + cls_bpf: --fastpath-attach tc, or auto where tcx is missing) from %s; on an older kernel the kernel refuses the program and the whole policy runs through NFQUEUE (every rule still holds; the kernel path's speed is lost)",
		prog, strings.Join(recent, ", "), lack, max2(prog, tcxSince), prog), nil
}

// helperName is the C name of fn: FnKtimeGetBootNs is
// bpf_ktime_get_boot_ns.
func helperName(fn asm.BuiltinFunc) string {
	var b strings.Builder
	b.WriteString("bpf")
	for _, r := range strings.TrimPrefix(fn.String(), "Fn") {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func max2(a, b kver) kver {
	if a.less(b) {
		return b
	}
	return a
}
