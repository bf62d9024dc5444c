//go:build linux

package fastpath

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
)

// childEnv names the namespace a child run of TestKillDetaches attaches
// in, and the attach mode: "NS MODE".
const childEnv = "FASTPATH_TEST_CHILD_NS"

// doIfc runs f in namespace ns (as testutil.Do) with the interface named
// name there.
func doIfc(ns, name string, f func(ifc *net.Interface) error) error {
	return testutil.Do(ns, func() error {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		return f(ifc)
	})
}

// vethPair makes two namespaces of the test's own joined by a veth pair:
// vfa (10.77.0.1) in the first, vfb (10.77.0.2) in the second.
func vethPair(t *testing.T) (nsA, nsB string) {
	t.Helper()
	pid := os.Getpid()
	nsA = testutil.NewNetns(t, fmt.Sprintf("psfp-a-%d", pid))
	nsB = testutil.NewNetns(t, fmt.Sprintf("psfp-b-%d", pid))
	testutil.MustRun(t, "ip", "-n", nsA, "link", "add", "vfa", "type", "veth", "peer", "name", "vfb", "netns", nsB)
	testutil.MustRun(t, "ip", "-n", nsA, "addr", "add", "10.77.0.1/24", "dev", "vfa")
	testutil.MustRun(t, "ip", "-n", nsB, "addr", "add", "10.77.0.2/24", "dev", "vfb")
	testutil.MustRun(t, "ip", "-n", nsA, "link", "set", "vfa", "up")
	testutil.MustRun(t, "ip", "-n", nsB, "link", "set", "vfb", "up")
	return nsA, nsB
}

// killChild is the child of TestKillDetaches: it loads a policy that drops
// UDP to port 9001, attaches it at vfb by mode, prints the ids of its program and
// maps, and waits to be killed (a minute at most).
func killChild(t *testing.T, ns string, mode AttachMode) {
	f := &policy.File{Rules: []policy.Rule{{Name: "blocked", Action: "drop", Match: &policy.Match{Proto: []string{"udp"}, Dport: []string{"9001"}}}}}
	s, _, err := Compile(f, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Load(s)
	if err != nil {
		t.Fatal(err)
	}
	err = doIfc(ns, "vfb", func(ifc *net.Interface) (err error) {
		_, err = Attach(p.Prog(), ifc.Index, mode)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	info, _ := p.objs.Fastpath.Info()
	id, _ := info.ID()
	ids = append(ids, fmt.Sprintf("prog:%d", id))
	for _, m := range []*ebpf.Map{p.objs.Config, p.objs.Rules, p.objs.Flows, p.objs.SrcCidrs, p.objs.DstCidrs, p.objs.Counters} {
		mi, _ := m.Info()
		mid, _ := mi.ID()
		ids = append(ids, fmt.Sprintf("map:%d", mid))
	}
	fmt.Printf("attached %s\n", strings.Join(ids, " "))
	time.Sleep(time.Minute)
}

// TestKillDetaches: a process that attached the program by tcx and is
// SIGKILLed leaves nothing behind: no program at the interface, its
// program and maps gone from the kernel (by id), and the traffic it dropped
// flows again (unlimited, as with fail-open). Attached by tc, the filter
// outlives it (cls_bpf holds the program: the documented bound) until
// RemoveLeftover, what the next start runs, removes it; then the same.
func TestKillDetaches(t *testing.T) {
	if env := os.Getenv(childEnv); env != "" {
		ns, mode, _ := strings.Cut(env, " ")
		killChild(t, ns, AttachMode(mode))
		return
	}
	testutil.NeedRoot(t, "creates network namespaces and attaches an eBPF program")
	testutil.NeedTools(t, "ip", "tc")
	for _, mode := range []AttachMode{AttachTCX, AttachTC} {
		t.Run(string(mode), func(t *testing.T) { testKill(t, mode) })
	}
}

func testKill(t *testing.T, mode AttachMode) {
	nsA, nsB := vethPair(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDetaches$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+nsB+" "+string(mode))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "attached ") {
				line <- sc.Text()
				break
			}
		}
		close(line)
		for sc.Scan() { // drain
		}
	}()
	var ids []string
	select {
	case l, ok := <-line:
		if !ok {
			t.Fatal("the child ended without attaching")
		}
		ids = strings.Fields(l)[1:]
		t.Logf("the child attached: %v", ids)
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not attach within a minute")
	}
	if n := attachedAt(t, mode, nsB, "vfb"); n != 1 {
		t.Fatalf("%d programs attached by %s at vfb with the child running, want 1", n, mode)
	}

	if mode == AttachTC {
		// The child runs: its filter is not a leftover.
		if err := doIfc(nsB, "vfb", func(ifc *net.Interface) (err error) {
			n, err := RemoveLeftover(ifc.Index)
			if err == nil && n != 0 {
				err = fmt.Errorf("RemoveLeftover removed %d filters of a running process", n)
			}
			return err
		}); err != nil {
			t.Error(err)
		}
	}

	var recv *net.UDPConn
	if err := testutil.Do(nsB, func() error {
		recv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9001})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	var send *net.UDPConn
	if err := testutil.Do(nsA, func() error {
		send, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9001})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	buf := make([]byte, 64)
	send.Write([]byte("while attached"))
	recv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, _, err := recv.ReadFromUDP(buf); err == nil {
		t.Error("a packet the child's program drops arrived")
	}

	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true
	if mode == AttachTC {
		// The filter holds the program: still there, still dropping.
		time.Sleep(200 * time.Millisecond)
		if n := testutil.TCFilters(t, nsB, "vfb"); n != 1 {
			t.Fatalf("after the kill, %d tc filters of ours at vfb, want the one the child left", n)
		}
		send.Write([]byte("left over"))
		recv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := recv.ReadFromUDP(buf); err == nil {
			t.Error("the left-over filter's program did not drop")
		}
		var removed int
		if err := doIfc(nsB, "vfb", func(ifc *net.Interface) (err error) {
			removed, err = RemoveLeftover(ifc.Index)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if removed != 1 {
			t.Errorf("RemoveLeftover removed %d filters, want 1", removed)
		}
		if q := testutil.MustRun(t, "ip", "netns", "exec", nsB, "tc", "qdisc", "show", "dev", "vfb"); strings.Contains(q, "clsact") {
			t.Errorf("after RemoveLeftover, a clsact qdisc is left on vfb:\n%s", q)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return attachedAt(t, mode, nsB, "vfb") == 0 },
		"a program is still attached at vfb after its process was killed")
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, id := range ids {
			kind, n, _ := strings.Cut(id, ":")
			var v uint32
			fmt.Sscan(n, &v)
			var err error
			if kind == "prog" {
				var p *ebpf.Program
				if p, err = ebpf.NewProgramFromID(ebpf.ProgramID(v)); err == nil {
					p.Close()
				}
			} else {
				var m *ebpf.Map
				if m, err = ebpf.NewMapFromID(ebpf.MapID(v)); err == nil {
					m.Close()
				}
			}
			if err == nil {
				return false
			}
		}
		return true
	}, "the killed child's program or maps still exist (%v)", ids)
	for i := range 10 {
		send.Write([]byte(fmt.Sprintf("after %d", i)))
	}
	n := 0
	for n < 10 {
		recv.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := recv.ReadFromUDP(buf); err != nil {
			break
		}
		n++
	}
	if n != 10 {
		t.Errorf("after the kill, %d of 10 packets arrived, want all", n)
	}
}
