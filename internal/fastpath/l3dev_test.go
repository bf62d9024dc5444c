//go:build linux

package fastpath

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/internal/inetsum"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
)

// l3Policy: a limit keyed by source on UDP port 9000 and a drop rule on
// port 9001.
func l3Policy() *policy.File {
	return &policy.File{Rules: []policy.Rule{
		{Name: "lim", PPS: ptr(50.0), Burst: ptr(5.0), Key: "src", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9000"}}},
		{Name: "blocked", Action: "drop", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9001"}}},
	}}
}

// checkL3 reads the rules' counters after n packets to port 9000 and 10 to
// 9001 were sent over an L3 device: every one decided by its rule (before
// the L3 entry point: none, the program read the IP header at offset 14),
// the limit's accepted within burst + rate × the time it took, the drop
// rule's dropped.
func checkL3(t *testing.T, p *Program, n int, elapsed time.Duration) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool {
		a, err := p.RuleCounters(0)
		b, err2 := p.RuleCounters(1)
		return err == nil && err2 == nil && a.Packets >= uint64(n) && b.Packets >= 10
	}, "the program decided fewer than %d packets of rule lim and 10 of rule blocked", n)
	lim, _ := p.RuleCounters(0)
	blk, _ := p.RuleCounters(1)
	bound := 5 + 50*elapsed.Seconds() + 1
	t.Logf("lim %+v (bound %.1f), blocked %+v", lim, bound, blk)
	if lim.Packets != uint64(n) || float64(lim.Accepted) > bound || lim.Accepted < 5 {
		t.Errorf("rule lim: %+v, want %d packets, 5 to %.1f accepted", lim, n, bound)
	}
	if blk.Dropped != 10 {
		t.Errorf("rule blocked: %+v, want 10 dropped", blk)
	}
}

// TestL3Ipip attaches the program (ProgFor: the L3 entry point) at tcx
// ingress of an ipip tunnel between two namespaces of the test's own and
// sends real UDP through it.
func TestL3Ipip(t *testing.T) {
	testutil.NeedRoot(t, "creates network namespaces, an ipip tunnel, attaches an eBPF program")
	testutil.NeedTools(t, "ip")
	p, _ := loadPolicy(t, l3Policy())
	if err := p.SetNow(0); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	nsA := testutil.NewNetns(t, fmt.Sprintf("psfd-a-%d", pid))
	nsB := testutil.NewNetns(t, fmt.Sprintf("psfd-b-%d", pid))
	testutil.MustRun(t, "ip", "-n", nsA, "link", "add", "vda", "type", "veth", "peer", "name", "vdb", "netns", nsB)
	for _, c := range [][]string{
		{nsA, "addr", "add", "10.78.0.1/24", "dev", "vda"}, {nsB, "addr", "add", "10.78.0.2/24", "dev", "vdb"},
		{nsA, "link", "set", "vda", "up"}, {nsB, "link", "set", "vdb", "up"},
	} {
		testutil.MustRun(t, "ip", append([]string{"-n", c[0]}, c[1:]...)...)
	}
	if out, err := testutil.RunIn(nsA, 10*time.Second, "ip", "link", "add", "ipa", "type", "ipip", "local", "10.78.0.1", "remote", "10.78.0.2"); err != nil {
		t.Skipf("no ipip tunnels here: %v: %s", err, out)
	}
	testutil.MustRun(t, "ip", "-n", nsB, "link", "add", "ipb", "type", "ipip", "local", "10.78.0.2", "remote", "10.78.0.1")
	for _, c := range [][]string{
		{nsA, "addr", "add", "10.250.0.1", "peer", "10.250.0.2", "dev", "ipa"}, {nsB, "addr", "add", "10.250.0.2", "peer", "10.250.0.1", "dev", "ipb"},
		{nsA, "link", "set", "ipa", "up"}, {nsB, "link", "set", "ipb", "up"},
	} {
		testutil.MustRun(t, "ip", append([]string{"-n", c[0]}, c[1:]...)...)
	}
	var l *Link
	err := doIfc(nsB, "ipb", func(ifc *net.Interface) (err error) {
		prog, err := p.ProgFor(ifc.Index)
		if err != nil {
			return err
		}
		if prog != p.objs.FastpathL3 {
			return fmt.Errorf("ProgFor(ipb) is not the L3 entry point")
		}
		l, err = p.Attach(ifc.Index)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const n = 200
	var elapsed time.Duration
	err = testutil.Do(nsA, func() error {
		var cs [2]*net.UDPConn
		for i, port := range []int{9000, 9001} {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 250, 0, 2), Port: port})
			if err != nil {
				return err
			}
			defer c.Close()
			cs[i] = c
		}
		start := time.Now()
		for i := range n {
			cs[0].Write([]byte(fmt.Sprintf("lim %d", i)))
		}
		elapsed = time.Since(start)
		for i := range 10 {
			cs[1].Write([]byte(fmt.Sprintf("blocked %d", i)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkL3(t, p, n, elapsed)
}

// TestL3Tun attaches the program (ProgFor: the L3 entry point) at tcx
// ingress of a tun device in a namespace of the test's own and writes IPv4
// UDP packets into it: the kernel receives them on the device as a
// WireGuard-style L3 device delivers them.
func TestL3Tun(t *testing.T) {
	testutil.NeedRoot(t, "creates a network namespace and a tun device, attaches an eBPF program")
	testutil.NeedTools(t, "ip")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
	p, _ := loadPolicy(t, l3Policy())
	if err := p.SetNow(0); err != nil {
		t.Fatal(err)
	}
	ns := testutil.NewNetns(t, fmt.Sprintf("psfd-t-%d", os.Getpid()))
	fd := newTun(t, ns, "pstun0", 0)
	var l link.Link
	testutil.MustRun(t, "ip", "-n", ns, "addr", "add", "10.251.0.1/24", "dev", "pstun0")
	testutil.MustRun(t, "ip", "-n", ns, "link", "set", "pstun0", "up")
	err := doIfc(ns, "pstun0", func(ifc *net.Interface) (err error) {
		prog, err := p.ProgFor(ifc.Index)
		if err != nil {
			return err
		}
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pkt := func(dport uint16, i int) []byte {
		b := build(flowDesc{netip.MustParseAddr("10.251.0.2"), netip.MustParseAddr("10.251.0.1"), 17, 40000, dport}, 40)[14:]
		binary.BigEndian.PutUint16(b[20+4:], 20) // UDP length; checksum 0: none
		binary.BigEndian.PutUint16(b[4:], uint16(i))
		binary.BigEndian.PutUint16(b[10:], ^inetsum.Add(b[:20], 0))
		return b
	}
	const n = 200
	start := time.Now()
	for i := range n {
		if _, err := unix.Write(fd, pkt(9000, i)); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	for i := range 10 {
		unix.Write(fd, pkt(9001, i))
	}
	checkL3(t, p, n, elapsed)
}

// newTun creates the tun device name (IFF_TUN, no packet information) in
// the namespace ns; linkType, if not 0, sets its link type (TUNSETLINK). It
// returns the device's file descriptor (closed by t.Cleanup).
func newTun(t *testing.T, ns, name string, linkType int) int {
	t.Helper()
	fd := -1
	err := testutil.Do(ns, func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		if linkType != 0 {
			if err := unix.IoctlSetInt(fd, unix.TUNSETLINK, linkType); err != nil {
				return fmt.Errorf("TUNSETLINK: %w", err)
			}
		}
		return nil
	})
	if fd >= 0 {
		t.Cleanup(func() { unix.Close(fd) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestProgForRefuses: a link type the program cannot decode (a tun device
// made an 802.11 radiotap one with TUNSETLINK) is refused with one line
// naming the interface and its type.
func TestProgForRefuses(t *testing.T) {
	testutil.NeedRoot(t, "creates a network namespace and a tun device")
	testutil.NeedTools(t, "ip")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
	p, _ := loadPolicy(t, l3Policy())
	ns := testutil.NewNetns(t, fmt.Sprintf("psfd-r-%d", os.Getpid()))
	newTun(t, ns, "psradio0", unix.ARPHRD_IEEE80211_RADIOTAP)
	newTun(t, ns, "psipip0", unix.ARPHRD_TUNNEL)
	err := doIfc(ns, "psradio0", func(ifc *net.Interface) (err error) {
		_, err = p.ProgFor(ifc.Index)
		if err == nil {
			return fmt.Errorf("ProgFor of a radiotap device: no error")
		}
		t.Log(err)
		if want := "interface psradio0: link type 803 "; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			return fmt.Errorf("ProgFor's error %q: want one line starting %q", err, want)
		}
		if _, err := p.Attach(ifc.Index); err == nil {
			return fmt.Errorf("Attach of a radiotap device: no error")
		}
		ifc, err = net.InterfaceByName("psipip0")
		if err != nil {
			return err
		}
		if prog, err := p.ProgFor(ifc.Index); err != nil || prog != p.objs.FastpathL3 {
			return fmt.Errorf("ProgFor of an ARPHRD_TUNNEL device: %v, %v: want the L3 entry point", prog, err)
		}
		if ifc, err = net.InterfaceByName("lo"); err != nil {
			return err
		}
		if prog, err := p.ProgFor(ifc.Index); err != nil || prog != p.objs.Fastpath {
			return fmt.Errorf("ProgFor of lo: %v, %v: want the Ethernet entry point", prog, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
