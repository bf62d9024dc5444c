// Package netnstest holds the helpers of the root tests that bind real
// NFQUEUE queues (packages nfq and failopen): a network namespace of the
// test's own with a queue rule, a UDP pair over its lo, and child runs of
// the test binary. It imports nothing of packetshaper's but
// internal/testutil, so nfq's own (internal) tests can use it.
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// These tests bind real NFQUEUE queues in a network namespace of their own:
// each locks its goroutine to an OS thread, unshares a new network namespace
// for that thread (never re-locked to anything else: the thread exits with
// the test, and the namespace, its rules and its queues go with it), brings
// up lo, adds an iptables rule queueing UDP to TestPort, and sends bounded UDP
// over lo. They need root; CI runs them as root.

const TestPort = 9999

// UnshareQueue moves the calling test goroutine into a fresh network
// namespace of its thread (testutil.Unshare: lo up, gone with the thread)
// with an iptables rule queueing UDP to TestPort (in OUTPUT) on the given
// queue, with bypass. (testutil.NewNetns is the other kind: a named
// namespace, ip netns add, that processes run in.)
func UnshareQueue(t testing.TB, queue uint16) {
	t.Helper()
	testutil.NeedRoot(t, "creates a network namespace and an iptables NFQUEUE rule")
	testutil.NeedTools(t, "iptables", "ip")
	testutil.Unshare(t)
	// iptables, not an nft "queue" statement: kernels built without
	// CONFIG_NFT_QUEUE (like the CI VM's) only have the xt NFQUEUE target.
	Run(t, "", "iptables", "-A", "OUTPUT", "-p", "udp", "--dport", fmt.Sprint(TestPort),
		"-j", "NFQUEUE", "--queue-num", fmt.Sprint(queue), "--queue-bypass")
}

func Run(t testing.TB, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// UDPPair returns a sender connected to a receiver on 127.0.0.1:TestPort,
// both created in the calling thread's namespace, and a counter of the
// datagrams received, keyed by their first payload byte pair (a uint16 seq).
type UDPPair struct {
	Tx   *net.UDPConn
	Rx   *net.UDPConn
	Mu   sync.Mutex
	Got  map[uint16]int
	At   map[uint16]int64 // when each first arrived (wall clock, ns)
	N    atomic.Int64
	done chan struct{}
}

func NewUDPPair(t testing.TB) *UDPPair {
	t.Helper()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: TestPort})
	if err != nil {
		t.Fatal(err)
	}
	// Big enough for every datagram a test sends, so that "arrived" means
	// "the verdict was ACCEPT" and never "lost in a full socket".
	if rc, err := rx.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
				t.Errorf("SO_RCVBUFFORCE: %v", err)
			}
		})
	}
	tx, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: TestPort})
	if err != nil {
		t.Fatal(err)
	}
	p := &UDPPair{Tx: tx, Rx: rx, Got: map[uint16]int{}, At: map[uint16]int64{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 2048)
		for {
			n, err := rx.Read(buf)
			if err != nil {
				return
			}
			if n >= 2 {
				now := time.Now().UnixNano()
				seq := uint16(buf[0])<<8 | uint16(buf[1])
				p.Mu.Lock()
				if p.Got[seq]++; p.Got[seq] == 1 {
					p.At[seq] = now
				}
				p.Mu.Unlock()
			}
			p.N.Add(1)
		}
	}()
	t.Cleanup(func() {
		tx.Close()
		rx.Close()
		<-p.done
	})
	return p
}

// send sends datagram number seq with the given payload size (>= 2).
func (p *UDPPair) Send(t testing.TB, seq uint16, size int) {
	t.Helper()
	b := make([]byte, size)
	b[0], b[1] = byte(seq>>8), byte(seq)
	if _, err := p.Tx.Write(b); err != nil {
		t.Fatalf("send %d: %v", seq, err)
	}
}

// waitCount waits until want datagrams were received, or the timeout.
func (p *UDPPair) WaitCount(want int64, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && p.N.Load() < want {
		time.Sleep(5 * time.Millisecond)
	}
	return p.N.Load()
}

// pending is the bytes waiting in the receiver's socket (SIOCINQ): 0 once
// the reader has taken every datagram delivered so far.
func (p *UDPPair) Pending() int {
	n := -1
	if rc, err := p.Rx.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
				n = v
			}
		})
	}
	return n
}

// settle waits until the received count stops changing for 100 ms.
func (p *UDPPair) Settle(timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	last := p.N.Load()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		n := p.N.Load()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

// ChildMode is NFQ_TEST_CHILD in a child started by RunChild, else "".
func ChildMode() string { return os.Getenv("NFQ_TEST_CHILD") }

// RunChild runs test name of this test binary in a child process, as user
// uid, in the calling thread's network namespace, with NFQ_TEST_CHILD=mode,
// and returns its output.
func RunChild(t *testing.T, name, mode string, uid uint32) string {
	t.Helper()
	// The test binary's directory is root-only: copy it where anyone can run it.
	dir, err := os.MkdirTemp("", "nfqtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := dir + "/nfq.test"
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "NFQ_TEST_CHILD="+mode)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s (%s): %v\n%s", name, mode, err, out)
	}
	return string(out)
}

// Open opens a queue with open(c), failing the test on an error, and
// closes it when the test ends.
func Open[Q io.Closer, C any](t testing.TB, open func(C) (Q, error), c C) Q {
	t.Helper()
	q, err := open(c)
	if err != nil {
		t.Fatalf("Open(%+v): %v", c, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// RunQueue runs q in a goroutine and returns a stop function that cancels
// it and returns how long Run took to return and its error.
func RunQueue[H any](t testing.TB, q interface {
	Run(context.Context, H) error
}, fn H) (stop func() (time.Duration, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.Run(ctx, fn) }()
	var once sync.Once
	var took time.Duration
	var err error
	stop = func() (time.Duration, error) {
		once.Do(func() {
			t0 := time.Now()
			cancel()
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				err = errors.New("Run did not return within 5 s of cancel")
			}
			took = time.Since(t0)
		})
		return took, err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// SeqOf returns the sequence number in a queued UDP/IPv4 packet's payload
// (from its IP header on).
func SeqOf(d []byte) (uint16, bool) {
	if len(d) < 20 || d[0]>>4 != 4 {
		return 0, false
	}
	off := int(d[0]&0xf)*4 + 8
	if len(d) < off+2 {
		return 0, false
	}
	return uint16(d[off])<<8 | uint16(d[off+1]), true
}
