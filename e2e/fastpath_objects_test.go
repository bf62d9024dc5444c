package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// bpfObjects are the eBPF programs, maps and links a process holds open,
// by their kernel IDs.
type bpfObjects struct{ progs, maps, links []uint32 }

func (o bpfObjects) String() string {
	return fmt.Sprintf("programs %v, maps %v, links %v", o.progs, o.maps, o.links)
}

// bpfObjectsOf reads the IDs of the eBPF objects process pid holds from
// /proc/PID/fdinfo: the kernel writes link_id, prog_id or map_id there for
// each BPF file descriptor (a link's also names its program: it counts as
// the link).
func bpfObjectsOf(t *testing.T, pid int) bpfObjects {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var o bpfObjects
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		fields := map[string]uint32{}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
				fields[k] = uint32(n)
			}
		}
		if id, ok := fields["link_id"]; ok {
			o.links = append(o.links, id)
		} else if id, ok := fields["prog_id"]; ok {
			o.progs = append(o.progs, id)
		} else if id, ok := fields["map_id"]; ok {
			o.maps = append(o.maps, id)
		}
	}
	return o
}

// bpfLeft returns those of o's objects that the kernel still has, asking
// it by ID (as bpftool prog/map/link show id does). Opening one by its ID
// takes a reference: it is closed at once.
func bpfLeft(t *testing.T, o bpfObjects) bpfObjects {
	t.Helper()
	var left bpfObjects
	check := func(kind string, ids []uint32, open func(uint32) (interface{ Close() error }, error), out *[]uint32) {
		for _, id := range ids {
			h, err := open(id)
			switch {
			case err == nil:
				h.Close()
				*out = append(*out, id)
			case !errors.Is(err, os.ErrNotExist):
				t.Fatalf("asking the kernel for %s %d: %v", kind, id, err)
			}
		}
	}
	check("program", o.progs, func(id uint32) (interface{ Close() error }, error) { return ebpf.NewProgramFromID(ebpf.ProgramID(id)) }, &left.progs)
	check("map", o.maps, func(id uint32) (interface{ Close() error }, error) { return ebpf.NewMapFromID(ebpf.MapID(id)) }, &left.maps)
	check("link", o.links, func(id uint32) (interface{ Close() error }, error) { return link.NewFromID(link.ID(id)) }, &left.links)
	return left
}

func (o bpfObjects) empty() bool { return len(o.progs)+len(o.maps)+len(o.links) == 0 }

// bpffsEntries lists what /sys/fs/bpf (the BPF file system, where objects
// are pinned) holds whose name mentions packetshaper or the fast path; none
// when it is not there.
func bpffsEntries(t *testing.T) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir("/sys/fs/bpf", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n := strings.ToLower(d.Name()); strings.Contains(n, "packetshaper") || strings.Contains(n, "fastpath") {
			found = append(found, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("walking /sys/fs/bpf: %v", err)
	}
	return found
}
