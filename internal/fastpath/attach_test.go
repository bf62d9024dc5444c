//go:build linux

package fastpath

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
)

// TestAttach attaches the program at ingress, by tcx and by tc (clsact +
// cls_bpf), of one end of a veth
// pair between two network namespaces of the test's own, sends real UDP
// traffic across, and counts what arrives: a limit rule's flow gets at most
// burst + rate × the time it sent (none over), its drops are counted; a
// drop rule's packets never arrive; and once the link is closed the
// program is gone (BPF_PROG_QUERY lists nothing at the interface's tcx
// ingress; tc, no filter of ours and no clsact qdisc) and the drop rule's
// packets arrive.
func TestAttach(t *testing.T) {
	testutil.NeedRoot(t, "creates network namespaces and attaches an eBPF program")
	testutil.NeedTools(t, "ip", "tc")
	for _, mode := range []AttachMode{AttachTCX, AttachTC} {
		t.Run(string(mode), func(t *testing.T) { testAttach(t, mode) })
	}
}

// attachedAt counts the programs of mode at ingress of dev in ns.
func attachedAt(t *testing.T, mode AttachMode, ns, dev string) int {
	if mode == AttachTC {
		return testutil.TCFilters(t, ns, dev)
	}
	return testutil.TCXPrograms(t, ns, dev)
}

func testAttach(t *testing.T, mode AttachMode) {
	const rate, burst = 50.0, 5.0
	f := &policy.File{Rules: []policy.Rule{
		{Name: "lim", PPS: ptr(rate), Burst: ptr(burst), Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9000"}}},
		{Name: "blocked", Action: "drop", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9001"}}},
	}}
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	if err := p.SetNow(0); err != nil { // the clock, as live
		t.Fatal(err)
	}

	nsA, nsB := vethPair(t)

	var l *Link
	recv := map[int]*net.UDPConn{}
	err = doIfc(nsB, "vfb", func(ifc *net.Interface) (err error) {
		if l, err = Attach(p.Prog(), ifc.Index, mode); err != nil {
			return err
		}
		if l.Mode != mode {
			return fmt.Errorf("attached by %s, want %s", l.Mode, mode)
		}
		for _, port := range []int{9000, 9001} {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: port})
			if err != nil {
				return err
			}
			c.SetReadBuffer(1 << 20)
			recv[port] = c
			t.Cleanup(func() { c.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			testutil.Do(nsB, l.Close)
		}
	})
	send := map[int]*net.UDPConn{}
	err = testutil.Do(nsA, func() error {
		for _, port := range []int{9000, 9001} {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: port})
			if err != nil {
				return err
			}
			send[port] = c
			t.Cleanup(func() { c.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// drain counts the datagrams waiting on c, waiting until want have
	// arrived (or a while, when fewer come).
	drain := func(c *net.UDPConn, want uint64) uint64 {
		var n uint64
		buf := make([]byte, 2048)
		deadline := time.Now().Add(5 * time.Second)
		for {
			wait := 50 * time.Millisecond
			if n < want {
				wait = time.Until(deadline)
			}
			c.SetReadDeadline(time.Now().Add(max(wait, time.Millisecond)))
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return n
			}
			n++
		}
	}

	const n = 200
	start := time.Now()
	for i := range n {
		if _, err := send[9000].Write([]byte(fmt.Sprintf("lim %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		c, err := p.RuleCounters(0)
		return err == nil && c.Packets >= n
	}, "the program decided fewer than %d packets of rule lim", n)
	elapsed := time.Since(start)
	lim, _ := p.RuleCounters(0)
	got := drain(recv[9000], lim.Accepted)
	bound := burst + rate*elapsed.Seconds() + 1
	t.Logf("rule lim: %d sent in %v, %d accepted, %d dropped by the program, %d arrived (bound %.1f)", n, elapsed, lim.Accepted, lim.Dropped, got, bound)
	if lim.Packets != n || lim.Accepted+lim.Dropped != n {
		t.Errorf("counters: %+v, want %d packets, accepted + dropped", lim, n)
	}
	if got != lim.Accepted {
		t.Errorf("%d arrived, the program accepted %d", got, lim.Accepted)
	}
	if float64(got) > bound || got < uint64(burst) {
		t.Errorf("%d arrived: want between the burst (%v) and burst + rate × %v = %.1f", got, burst, elapsed, bound)
	}

	for i := range 10 {
		send[9001].Write([]byte(fmt.Sprintf("blocked %d", i)))
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		c, err := p.RuleCounters(1)
		return err == nil && c.Dropped >= 10
	}, "the program dropped fewer than 10 packets of rule blocked")
	if got := drain(recv[9001], 0); got != 0 {
		t.Errorf("%d packets of the drop rule arrived", got)
	}

	// Closing the link detaches the program: nothing left on the
	// interface, and the drop rule's packets arrive.
	attached := func() int { return attachedAt(t, mode, nsB, "vfb") }
	if n := attached(); n != 1 {
		t.Errorf("%d programs attached by %s at ingress of vfb, want 1", n, mode)
	}
	if err := testutil.Do(nsB, l.Close); err != nil {
		t.Fatal(err)
	}
	closed = true
	if n := attached(); n != 0 {
		t.Errorf("after Close, %d programs attached by %s at ingress of vfb, want none", n, mode)
	}
	if q := testutil.MustRun(t, "ip", "netns", "exec", nsB, "tc", "qdisc", "show", "dev", "vfb"); strings.Contains(q, "clsact") {
		t.Errorf("after Close, a clsact qdisc is left on vfb:\n%s", q)
	}
	for i := range 10 {
		send[9001].Write([]byte(fmt.Sprintf("free %d", i)))
	}
	if got := drain(recv[9001], 10); got != 10 {
		t.Errorf("after Close, %d of 10 packets arrived, want all", got)
	}
	if c, _ := p.RuleCounters(1); c.Packets != 10 {
		t.Errorf("after Close the program still counts packets: %+v", c)
	}
}

// TestAttachAutoFallback: in auto mode, a kernel that answers it has no
// tcx (ebpf.ErrNotSupported, as cilium/ebpf's probe does) gets the program
// by tc, and the Link says why; forced tcx is then an error; any other
// tcx error is an error too, not a fallback.
func TestAttachAutoFallback(t *testing.T) {
	testutil.NeedRoot(t, "creates network namespaces and attaches an eBPF program")
	testutil.NeedTools(t, "ip", "tc")
	s, _, err := Compile(&policy.File{Rules: []policy.Rule{{Name: "blocked", Action: "drop", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9001"}}}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := needKernel(t, s)
	_, nsB := vethPair(t)
	answer := fmt.Errorf("tcx: %w", ebpf.ErrNotSupported)
	attachTCX = func(link.TCXOptions) (link.Link, error) { return nil, answer }
	t.Cleanup(func() { attachTCX = link.AttachTCX })
	err = doIfc(nsB, "vfb", func(ifc *net.Interface) (err error) {
		if _, err := Attach(p.Prog(), ifc.Index, AttachTCX); err == nil {
			return errors.New("forced tcx attached on a kernel without tcx")
		}
		l, err := Attach(p.Prog(), ifc.Index, AttachAuto)
		if err != nil {
			return err
		}
		defer l.Close()
		if l.Mode != AttachTC || !strings.Contains(l.Fallback, "not supported") {
			return fmt.Errorf("auto without tcx: mode %s, fallback %q; want tc and the kernel's answer", l.Mode, l.Fallback)
		}
		if n := testutil.TCFilters(t, nsB, "vfb"); n != 1 {
			return fmt.Errorf("%d tc filters, want 1", n)
		}
		answer = errors.New("some other error")
		if _, err := Attach(p.Prog(), ifc.Index, AttachAuto); err == nil || !strings.Contains(err.Error(), "some other error") {
			return fmt.Errorf("auto with another tcx error: %v, want that error", err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
