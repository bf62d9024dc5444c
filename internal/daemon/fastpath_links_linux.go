//go:build linux

package daemon

import (
	"fmt"
	"net"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/fastpath"
)

// An interface named by --fastpath can go and come back under the same
// name (a container or a VPN restarted: ip link del, then add): the
// program's link goes with the old interface. watchLoop looks up each
// named interface's index every watchEvery and attaches the program again
// to a new one, so an interface that came back is limited again within
// about watchEvery (plus the attach).

// watchEvery is how often watchLoop looks at the interfaces: a lookup by
// name per interface (one netlink request), so cheap enough at 2 a second.
const watchEvery = 500 * time.Millisecond

// The states of a link (control.FastpathLink.State).
const (
	linkAttached = "attached"
	linkGone     = "interface gone"
)

// fpLink is the fast path at one named interface; under fastPath.mu.
type fpLink struct {
	name    string
	ifindex int            // the index attached at; 0 while gone
	l       *fastpath.Link // nil while gone (or the attach failed)
	state   string
	// failedAt: the index whose attach failed (logged once; tried
	// again every turn).
	failedAt   int
	reattached uint64
}

// watchLoop checks the interfaces every every until unwatch.
func (fp *fastPath) watchLoop(every time.Duration) {
	defer close(fp.watched)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			fp.checkLinks()
		case <-fp.unwatch:
			return
		}
	}
}

// checkLinks attaches the current program at each named interface whose
// index changed (it was re-created) or that came back, and notes those
// gone: a log line each time.
func (fp *fastPath) checkLinks() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, fl := range fp.links {
		ifc, err := net.InterfaceByName(fl.name)
		idx := 0
		if err == nil {
			idx = ifc.Index
		}
		if idx == fl.ifindex && (fl.l != nil || idx == 0) {
			continue
		}
		if fl.l != nil {
			fl.l.Close() // the interface it was at is gone
			fl.l = nil
		}
		if idx == 0 {
			fl.ifindex, fl.state = 0, linkGone
			fp.log.Warn("fast path: interface gone: attached again when it comes back", "iface", fl.name)
			continue
		}
		l, err := fastpath.AttachTo(fp.attachable(fp.prog), idx, fp.mode)
		if err != nil {
			fl.ifindex, fl.state = 0, "attach failed: "+oneLine(err.Error())
			if fl.failedAt != idx {
				fl.failedAt = idx
				fp.log.Error("fast path: attaching again at a re-created interface failed: its traffic is not limited", "iface", fl.name, "err", oneLine(err.Error()))
			}
			continue
		}
		old := fl.ifindex
		fl.ifindex, fl.l, fl.state, fl.failedAt = idx, l, linkAttached, 0
		fl.reattached++
		fp.log.Info("fast path: interface re-created, attached again", "iface", fl.name, "ifindex", fmt.Sprintf("%d->%d", old, idx), "attach", string(l.Mode))
	}
}

// linkStatus is the fast path's state at each interface, for status.
func (fp *fastPath) linkStatus() []control.FastpathLink {
	if fp == nil {
		return nil
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	out := make([]control.FastpathLink, len(fp.links))
	for i, fl := range fp.links {
		out[i] = control.FastpathLink{Interface: fl.name, Ifindex: fl.ifindex, State: fl.state, Reattached: fl.reattached}
		if fl.l != nil {
			out[i].Attach = string(fl.l.Mode)
		}
		if fp.prog == nil && fl.l != nil {
			out[i].State += " (punting everything: the kernel refused the program)"
		}
	}
	return out
}

// kernelMapsMiB is the program's maps' kernel memory for the start line.
func (fp *fastPath) kernelMapsMiB() string {
	if fp == nil {
		return "off"
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return mib(fp.mapBytes)
}
