//go:build linux

package fastpath

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The tc filter's identity: what RemoveLeftover and `tc filter show dev
// IFACE ingress` recognise as packetshaper's (priority 0x5053, "PS"). Its
// name is TCName-PID, the process that attached it.
const (
	TCPriority = 0x5053
	TCHandle   = 1
	TCName     = "packetshaper"
)

// Link is the program attached at one interface's ingress, by a tcx link
// or a tc filter (Mode).
type Link struct {
	Ifindex int
	Mode    AttachMode // AttachTCX or AttachTC: the one used
	// Fallback: auto mode found no tcx (the kernel's answer, in one line).
	Fallback string
	tcx      link.Link
	// ownQdisc: the clsact qdisc was made by this Link: Close removes it
	// when no filter is left on it.
	ownQdisc bool
}

// attachTCX is link.AttachTCX (a test makes it answer as a kernel without
// tcx).
var attachTCX = link.AttachTCX

// Attach attaches prog at ingress of the interface ifindex (in the calling
// thread's network namespace), by mode. Every attach of the fast path goes
// through it.
func Attach(prog *ebpf.Program, ifindex int, mode AttachMode) (*Link, error) {
	switch mode {
	case AttachTCX, AttachAuto, "":
		l, err := attachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err == nil {
			return &Link{Ifindex: ifindex, Mode: AttachTCX, tcx: l}, nil
		}
		if mode == AttachTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attaching the fast path at tcx ingress of interface %d: %s", ifindex, oneLine(err.Error()))
		}
		l2, err2 := attachTC(prog, ifindex)
		if err2 != nil {
			return nil, err2
		}
		l2.Fallback = oneLine(err.Error())
		return l2, nil
	case AttachTC:
		return attachTC(prog, ifindex)
	}
	return nil, fmt.Errorf("attach mode %q: want tcx, tc or auto", mode)
}

// Attachable is what AttachTo attaches and Link.UpdateTo swaps in: a
// loaded Program (its entry point for the interface's link type, ProgFor)
// or the punt-everything program (PuntAll). The one place that picks the
// eBPF program for an interface: its users never hold one.
type Attachable interface {
	progFor(ifindex int) (*ebpf.Program, error)
}

func (p *Program) progFor(ifindex int) (*ebpf.Program, error) { return p.ProgFor(ifindex) }

// PuntAll is the punt-everything program (LoadPuntAll), attachable at any
// interface: it reads no header.
type PuntAll struct{ prog *ebpf.Program }

// NewPuntAll loads the punt-everything program for mark.
func NewPuntAll(mark uint32) (*PuntAll, error) {
	p, err := LoadPuntAll(mark)
	if err != nil {
		return nil, err
	}
	return &PuntAll{prog: p}, nil
}

func (p *PuntAll) progFor(int) (*ebpf.Program, error) { return p.prog, nil }

// Close frees the program (a link holding it keeps it until it goes).
func (p *PuntAll) Close() error { return p.prog.Close() }

// AttachTo attaches a's program for the interface ifindex at its ingress,
// by mode (Attach).
func AttachTo(a Attachable, ifindex int, mode AttachMode) (*Link, error) {
	prog, err := a.progFor(ifindex)
	if err != nil {
		return nil, err
	}
	return Attach(prog, ifindex, mode)
}

// UpdateTo swaps a's program for the link's interface in (Update).
func (l *Link) UpdateTo(a Attachable) error {
	prog, err := a.progFor(l.Ifindex)
	if err != nil {
		return err
	}
	return l.Update(prog)
}

// Attach attaches p at ingress of ifindex by AttachTo, in auto mode.
func (p *Program) Attach(ifindex int) (*Link, error) {
	return AttachTo(p, ifindex, AttachAuto)
}

// clsact is the clsact qdisc of ifindex.
func clsact(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
}

// filter is our tc filter at ingress of ifindex, running prog (nil: to
// delete it).
func filter(ifindex int, prog *ebpf.Program) *netlink.BpfFilter {
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: TCHandle, Priority: TCPriority, Protocol: unix.ETH_P_ALL,
		},
		Name: fmt.Sprintf("%s-%d", TCName, os.Getpid()), DirectAction: true, Fd: -1,
	}
	if prog != nil {
		f.Fd = prog.FD()
	}
	return f
}

func attachTC(prog *ebpf.Program, ifindex int) (*Link, error) {
	l := &Link{Ifindex: ifindex, Mode: AttachTC}
	err := netlink.QdiscAdd(clsact(ifindex))
	switch {
	case err == nil:
		l.ownQdisc = true
	case errors.Is(err, unix.EEXIST):
	default:
		return nil, fmt.Errorf("attaching the fast path by tc at interface %d: adding the clsact qdisc: %s", ifindex, oneLine(err.Error()))
	}
	if err := netlink.FilterAdd(filter(ifindex, prog)); err != nil {
		if l.ownQdisc {
			netlink.QdiscDel(clsact(ifindex))
		}
		why := oneLine(err.Error())
		if errors.Is(err, unix.EEXIST) {
			why = "another packetshaper's filter is there, of a process still running (tc filter show dev IFACE ingress pref 20563; tc filter del ... pref 20563 removes it)"
		}
		return nil, fmt.Errorf("attaching the fast path by tc at interface %d: adding the cls_bpf filter: %s", ifindex, why)
	}
	return l, nil
}

// Update swaps prog in, atomically (a tcx link's update, or tc's filter
// replace of the same priority and handle).
func (l *Link) Update(prog *ebpf.Program) error {
	if l.Mode == AttachTCX {
		return l.tcx.Update(prog)
	}
	return netlink.FilterReplace(filter(l.Ifindex, prog))
}

// Close detaches the program: the tcx link goes; the tc filter is
// deleted, and the clsact qdisc if it was ours and holds no other filter.
// An interface gone meanwhile took both with it: not an error.
func (l *Link) Close() error {
	if l.Mode == AttachTCX {
		return l.tcx.Close()
	}
	err := netlink.FilterDel(filter(l.Ifindex, nil))
	if Gone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the fast path's tc filter at interface %d: %s", l.Ifindex, oneLine(err.Error()))
	}
	if l.ownQdisc {
		removeEmptyClsact(l.Ifindex)
	}
	return nil
}

// Gone reports whether err says the interface (or the filter) is no
// longer there.
func Gone(err error) bool {
	return errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOLINK)
}

// removeEmptyClsact deletes the clsact qdisc of ifindex when no filter is
// left on it, at ingress or egress.
func removeEmptyClsact(ifindex int) {
	dev := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := netlink.FilterList(dev, parent); err != nil || len(fs) > 0 {
			return
		}
	}
	netlink.QdiscDel(clsact(ifindex))
}

// ours reports whether f is a tc filter Attach put there, and the pid of
// the process that did (0 if its name has none).
func ours(f netlink.Filter) (bool, int) {
	b, ok := f.(*netlink.BpfFilter)
	if !ok || b.Priority != TCPriority || b.Handle != TCHandle {
		return false, 0
	}
	if b.Name == TCName {
		return true, 0
	}
	pid, found := strings.CutPrefix(b.Name, TCName+"-")
	n, err := strconv.Atoi(pid)
	if !found || err != nil {
		return false, 0
	}
	return true, n
}

// running reports whether pid is a live process of the same program as
// this one (a packetshaper; a pid reused by another program is not).
func running(pid int) bool {
	if pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return false
	}
	self, err := os.ReadFile("/proc/self/comm")
	return err == nil && string(comm) == string(self)
}

// TCFilters counts packetshaper's tc filters at ingress of ifindex.
func TCFilters(ifindex int) (int, error) {
	fs, err := ingressFilters(ifindex)
	n := 0
	for _, f := range fs {
		if o, _ := ours(f); o {
			n++
		}
	}
	return n, err
}

// ingressFilters lists the tc filters at ingress of ifindex (none without
// a clsact qdisc).
func ingressFilters(ifindex int) ([]netlink.Filter, error) {
	dev := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
	qs, err := netlink.QdiscList(dev)
	if err != nil {
		return nil, fmt.Errorf("listing the qdiscs of interface %d: %s", ifindex, oneLine(err.Error()))
	}
	has := false
	for _, q := range qs {
		has = has || q.Type() == "clsact" || q.Type() == "ingress"
	}
	if !has {
		return nil, nil
	}
	fs, err := netlink.FilterList(dev, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, fmt.Errorf("listing the tc filters at ingress of interface %d: %s", ifindex, oneLine(err.Error()))
	}
	return fs, nil
}

// RemoveLeftover deletes the tc filters a packetshaper that was killed
// left at ingress of ifindex (the one thing of the fast path that outlives
// its process: a cls_bpf filter holds its program and maps), and the
// clsact qdisc when nothing else is left on it. It returns how many it
// removed. A filter whose process still runs is left alone.
func RemoveLeftover(ifindex int) (int, error) {
	fs, err := ingressFilters(ifindex)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range fs {
		if o, pid := ours(f); !o || running(pid) {
			continue
		}
		if err := netlink.FilterDel(filter(ifindex, nil)); err != nil && !Gone(err) {
			return n, fmt.Errorf("removing a leftover tc filter at interface %d: %s", ifindex, oneLine(err.Error()))
		}
		n++
	}
	if n > 0 {
		removeEmptyClsact(ifindex)
	}
	return n, nil
}
