package offload

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// perMinute5 lets a burst of 5 packets through, then one a minute: within
// a test, exactly 5.
var perMinute5 = shaper.OffloadLimit{Rate: 1.0 / 60, Burst: 5}

// These tests run against the real kernel in a network namespace of their
// own, as nfq's do: each locks its goroutine to an OS thread and unshares a
// new network namespace for it (the thread is never unlocked: it exits with
// the test, and the namespace, its rules and sets go with it), brings up lo
// and adds the rules with scripts/rules.sh (child processes inherit the
// thread's namespace). Traffic stays on lo. They need root; CI runs them as
// root.

const testPort = 9999

func newNetns(t testing.TB) {
	t.Helper()
	testutil.NeedRoot(t, "creates a network namespace and nft sets")
	testutil.NeedTools(t, "iptables", "ip6tables", "nft")
	testutil.Unshare(t)
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rules runs scripts/rules.sh in the test's namespace.
func rules(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, "bash", append([]string{"../../scripts/rules.sh"}, args...)...)
}

func listSet(t testing.TB, set string) string {
	t.Helper()
	return run(t, "nft", "list", "set", "inet", DefaultTable, set)
}

func open(t testing.TB, c Config) *Offloader {
	t.Helper()
	c.Logf = t.Logf
	o, err := Open(c)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// waitStats waits until ok(Stats) or 5 s.
func waitStats(t testing.TB, o *Offloader, what string, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(o.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: stats %+v", what, o.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// receiver counts the UDP datagrams arriving on a port, by source port.
type receiver struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  map[int]int
	done <-chan struct{}
}

func newReceiver(t testing.TB, network, addr string) *receiver {
	t.Helper()
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP(network, ua)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{conn: c, got: map[int]int{}}
	r.done = testutil.Receive(c, func(from net.Addr, _ []byte) {
		r.mu.Lock()
		r.got[from.(*net.UDPAddr).Port]++
		r.mu.Unlock()
	})
	t.Cleanup(func() { c.Close(); <-r.done })
	return r
}

func (r *receiver) count(port int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[port]
}

// wait waits up to 2 s for n datagrams from port, and returns the count.
func (r *receiver) wait(port, n int) int {
	deadline := time.Now().Add(2 * time.Second)
	for r.count(port) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return r.count(port)
}

// send sends n datagrams from local port sport to dst.
func send(t testing.TB, network, src, dst string, sport, n int) {
	t.Helper()
	la, err := net.ResolveUDPAddr(network, net.JoinHostPort(src, fmt.Sprint(sport)))
	if err != nil {
		t.Fatal(err)
	}
	ra, err := net.ResolveUDPAddr(network, dst)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP(network, la, ra)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, err := c.Write([]byte("offload test")); err != nil && !errors.Is(err, unix.EPERM) {
			// A drop in OUTPUT is EPERM to the sender.
			t.Fatalf("send: %v", err)
		}
	}
}

// TestOffloadUDP offloads one UDP 5-tuple (IPv4 and IPv6) with a limit of a
// burst of 5 then 1 a minute: of its packets the kernel lets 5 through and
// drops the others, counted by the drop rule and the element; another
// 5-tuple's all pass; once the element expires the first 5-tuple passes
// again.
//
// The drop checks need the element alive through all the sends, the expiry
// check a short timeout (the test waits it out). A timeout of 600 ms is
// tried first; when listing the set, sending and reading the counts took over 3/4 of it (a loaded machine), the
// same checks run again, in a new namespace, with twice the timeout, up to
// 4.8 s, and past that the test fails: it never skips.
func TestOffloadUDP(t *testing.T) {
	const first, last = 600 * time.Millisecond, 4800 * time.Millisecond
	for _, c := range []struct{ network, addr, nftAddr string }{
		{"udp4", "127.0.0.1", "127.0.0.1"},
		{"udp6", "::1", "::1"},
	} {
		t.Run(c.network, func(t *testing.T) {
			for timeout := first; ; timeout *= 2 {
				took, done := offloadUDP(t, c.network, c.addr, c.nftAddr, timeout)
				if done {
					return
				}
				if timeout >= last {
					t.Fatalf("listing the set, sending 2 × 20 datagrams on lo and reading the counts took %v, over 3/4 of the element's timeout, %v, even at the longest timeout tried", took, timeout)
				}
				t.Logf("listing the set, sending and reading the counts took %v, over 3/4 of the element's timeout, %v: again with %v", took, timeout, 2*timeout)
			}
		})
	}
}

// offloadUDP is one try of TestOffloadUDP with an element timeout of
// timeout, in a new namespace; done is false, with nothing checked, when
// the listing, the sends or the reading of the counts took (took) over 3/4
// of the timeout.
func offloadUDP(t *testing.T, network, addr, nftAddr string, timeout time.Duration) (took time.Duration, done bool) {
	t.Helper()
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", fmt.Sprint(testPort), "--offload")
	o := open(t, Config{Timeout: timeout})
	dst := net.JoinHostPort(addr, fmt.Sprint(testPort))
	r := newReceiver(t, network, dst)
	const offPort, otherPort, n = 40001, 40002, 20

	k := key(flows.ProtoUDP, addr, addr, offPort, testPort)
	o.Add(k, perMinute5)
	added := time.Now()
	waitStats(t, o, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	set := "ports4"
	if network == "udp6" {
		set = "ports6"
	}
	want := fmt.Sprintf("%s . %s . udp . %d . %d", nftAddr, nftAddr, offPort, testPort)
	if l := listSet(t, set); !strings.Contains(l, want+" limit rate over 1/minute counter packets 0 ") { // burst 5: nft does not list the default
		if took := time.Since(added); took > timeout*3/4 {
			return took, false // it may have expired already
		}
		t.Fatalf("set %s has no %q with its limit and counter:\n%s", set, want, l)
	}

	send(t, network, addr, dst, offPort, n)
	send(t, network, addr, dst, otherPort, n)
	// What the element did, read while it lives: lo queues datagrams in
	// order, so once the other port's have all been read, none of the
	// first port's is still coming.
	const burst = 5
	other, got := r.wait(otherPort, n), r.count(offPort)
	l := listSet(t, set)
	drops, _, dropsErr := o.KernelDrops()
	st := o.Stats()
	if took := time.Since(added); took > timeout*3/4 {
		return took, false
	}
	if got != burst || other != n {
		t.Errorf("offloaded 5-tuple: %d of %d arrived, want its burst, %d; another 5-tuple: %d, want %d", got, n, burst, other, n)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(want) + ` limit rate over 1/minute counter packets [1-9]`).MatchString(l) {
		t.Errorf("element's counter shows no drops:\n%s", l)
	}
	if dropsErr != nil || drops != n-burst {
		t.Errorf("KernelDrops() = %d packets, %v; want %d", drops, dropsErr, n-burst)
	}
	if st.Active != 1 || st.Errors != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want Active 1, no errors, none lost", st)
	}

	// The element expires by itself (the kernel's clock starts
	// when the batch is committed, a little after Add).
	time.Sleep(time.Until(added.Add(timeout)))
	for deadline := time.Now().Add(2 * time.Second); strings.Contains(listSet(t, set), want); {
		if time.Now().After(deadline) {
			t.Fatalf("element still listed %v after its timeout:\n%s", time.Since(added)-timeout, listSet(t, set))
		}
		time.Sleep(10 * time.Millisecond)
	}
	send(t, network, addr, dst, offPort, n)
	if got := r.wait(offPort, burst+n); got != burst+n {
		t.Errorf("after the timeout: %d of %d arrived", got-burst, n)
	}
	waitStats(t, o, "Active 0", func(s Stats) bool { return s.Active == 0 })
	if err := o.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	return 0, true
}

// TestOffloadNoPorts offloads a protocol without ports (GRE) by addresses
// and protocol, held to its limit.
func TestOffloadNoPorts(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "gre", "--family", "ipv4", "--offload")
	o := open(t, Config{Timeout: MaxTimeout})
	rx, err := net.ListenPacket("ip4:gre", "0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var mu sync.Mutex
	got := map[byte]int{} // by the payload's first byte: the destination's last byte
	testutil.Receive(rx, func(_ net.Addr, b []byte) {
		if len(b) > 0 {
			mu.Lock()
			got[b[0]]++
			mu.Unlock()
		}
	})
	o.Add(key(47, "127.0.0.1", "127.0.0.2", 0, 0), perMinute5)
	waitStats(t, o, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	if l := listSet(t, "noports4"); !strings.Contains(l, "127.0.0.1 . 127.0.0.2 . gre") {
		t.Fatalf("set noports4 has no 127.0.0.1 . 127.0.0.2 . gre:\n%s", l)
	}
	const n = 10
	for _, last := range []byte{2, 3} {
		tx, err := net.DialIP("ip4:gre", &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.IPAddr{IP: net.IPv4(127, 0, 0, last)})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			tx.Write([]byte{last, 0, 0, 0})
		}
		tx.Close()
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		done := got[3] == n
		mu.Unlock()
		if done {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got[2] != 5 || got[3] != n {
		t.Errorf("GRE to the offloaded pair: %d of %d arrived, want its burst, 5; to another address: %d, want %d", got[2], n, got[3], n)
	}
}

// TestClose checks that Close deletes the live elements it added and only
// those, and is quiet about elements that expired by themselves.
func TestClose(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	o := open(t, Config{Timeout: MaxTimeout})
	run(t, "nft", "add", "element", "inet", DefaultTable, "ports4", "{ 10.9.9.9 . 10.9.9.8 . tcp . 1 . 2 timeout 1m }")
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1000, 2000), perMinute5)
	o.Add(key(flows.ProtoTCP, "::1", "::2", 1000, 2000), perMinute5)
	o.Add(key(47, "127.0.0.1", "127.0.0.2", 0, 0), perMinute5)
	o.Add(key(50, "::1", "::2", 0, 0), perMinute5)
	waitStats(t, o, "4 elements", func(s Stats) bool { return s.Offloaded == 4 })
	for _, s := range setNames {
		if l := listSet(t, s); !strings.Contains(l, "elements =") {
			t.Errorf("set %s empty after Add:\n%s", s, l)
		}
	}
	// One of ours deleted by hand meanwhile: Close must not fail on it.
	run(t, "nft", "delete", "element", "inet", DefaultTable, "noports6", "{ ::1 . ::2 . esp }")
	if err := o.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, s := range setNames {
		l := listSet(t, s)
		if s == "ports4" {
			if !strings.Contains(l, "10.9.9.9") || strings.Contains(l, "127.0.0.1") {
				t.Errorf("after Close, set ports4 should hold only the foreign element:\n%s", l)
			}
		} else if strings.Contains(l, "elements =") {
			t.Errorf("after Close, set %s still has elements:\n%s", s, l)
		}
	}
	if err := o.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1, 2), perMinute5)
	if s := o.Stats(); s.Lost != 1 {
		t.Errorf("Add after Close: Lost %d, want 1", s.Lost)
	}

	// Elements that expired before Close: nothing to delete, no error.
	o2 := open(t, Config{Timeout: 50 * time.Millisecond})
	o2.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1, 2), perMinute5)
	waitStats(t, o2, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	time.Sleep(200 * time.Millisecond)
	if err := o2.Close(); err != nil {
		t.Errorf("Close after the elements expired: %v", err)
	}

	// The whole table deleted under a running Offloader: adds are
	// refused (counted), Close has nothing left to delete.
	o3 := open(t, Config{Timeout: MaxTimeout})
	o3.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1, 2), perMinute5)
	waitStats(t, o3, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	rules(t, "del", "--all")
	o3.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 3, 4), perMinute5)
	waitStats(t, o3, "a refusal", func(s Stats) bool { return s.Errors == 1 })
	if err := o3.Close(); err != nil {
		t.Errorf("Close with the table gone: %v", err)
	}
}

// TestRefresh: a flow reported again right after its add is skipped (packets
// that were already queued); reported later while its element should be
// live, it is added again with a fresh timeout, even when the element was
// deleted behind the Offloader's back.
func TestRefresh(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--offload")
	const timeout = 2 * time.Second
	o := open(t, Config{Timeout: timeout})
	k := key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1000, 2000)
	o.Add(k, perMinute5)
	o.Add(k, perMinute5)
	waitStats(t, o, "one add, one repeat", func(s Stats) bool { return s.Offloaded == 1 && s.Skipped == 1 })
	o.Add(k, perMinute5)
	waitStats(t, o, "a report within the grace skipped", func(s Stats) bool { return s.Skipped == 2 })

	time.Sleep(2 * maxRecent)
	o.Add(k, perMinute5)
	waitStats(t, o, "a refresh", func(s Stats) bool { return s.Refreshed == 1 })
	// The first add's element had at most timeout-2*maxRecent left.
	l := listSet(t, "ports4")
	if m := regexp.MustCompile(`expires ([0-9a-z.]+)`).FindStringSubmatch(l); m == nil {
		t.Errorf("no expiry listed:\n%s", l)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d <= timeout-2*maxRecent {
		t.Errorf("refreshed element expires in %s, want more than %v:\n%s", m[1], timeout-2*maxRecent, l)
	}

	run(t, "nft", "delete", "element", "inet", DefaultTable, "ports4", "{ 127.0.0.1 . 127.0.0.2 . udp . 1000 . 2000 }")
	time.Sleep(2 * maxRecent)
	o.Add(k, perMinute5)
	waitStats(t, o, "a refresh of a deleted element", func(s Stats) bool { return s.Refreshed == 2 })
	if l := listSet(t, "ports4"); !strings.Contains(l, "127.0.0.1 . 127.0.0.2 . udp . 1000 . 2000") {
		t.Errorf("element not back after a refresh:\n%s", l)
	}
	if s := o.Stats(); s.Errors != 0 || s.Offloaded != 1 || s.Active != 1 {
		t.Errorf("stats %+v: want Offloaded 1, Active 1, no errors", s)
	}
}

// TestKeysAgreeWithNft adds one element per set with nft and checks that
// encodeKey makes the very same bytes.
func TestKeysAgreeWithNft(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	for _, c := range []struct {
		set, elem string
		k         flows.Key
	}{
		{"ports4", "10.0.0.1 . 192.0.2.200 . udplite . 1 . 65534", key(flows.ProtoUDPLite, "10.0.0.1", "192.0.2.200", 1, 65534)},
		{"noports4", "10.0.0.1 . 10.0.0.2 . esp", key(50, "10.0.0.1", "10.0.0.2", 0, 0)},
		{"ports6", "2001:db8::1 . fe80::2 . sctp . 4660 . 22136", key(flows.ProtoSCTP, "2001:db8::1", "fe80::2", 0x1234, 0x5678)},
		{"noports6", "::1 . ::2 . 115", key(115, "::1", "::2", 0, 0)}, // L2TP
	} {
		run(t, "nft", "add", "element", "inet", DefaultTable, c.set, "{ "+c.elem+" timeout 1m }")
		conn, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		s, err := conn.GetSetByName(&nftables.Table{Name: DefaultTable, Family: nftables.TableFamilyINet}, c.set)
		if err != nil {
			t.Fatal(err)
		}
		elems, err := conn.GetSetElements(s)
		if err != nil || len(elems) != 1 {
			t.Fatalf("set %s: %d elements, %v", c.set, len(elems), err)
		}
		var b [maxKeyLen]byte
		set, n, ok := encodeKey(&c.k, &b)
		if !ok || setNames[set] != c.set || string(b[:n]) != string(elems[0].Key) {
			t.Errorf("%s { %s }: nft's key % x, encodeKey's % x (set %s)", c.set, c.elem, elems[0].Key, b[:n], setNames[set])
		}
	}
}

// TestOpenErrors: missing sets, sets of another type, a bad timeout: one
// line naming the fix.
func TestOpenErrors(t *testing.T) {
	newNetns(t)
	_, err := Open(Config{})
	t.Logf("Open without the table: %v", err)
	if err == nil || !errors.Is(err, ErrNoSets) || !strings.Contains(err.Error(), "scripts/rules.sh add ... --offload") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Open without the table: %v; want one line naming rules.sh add ... --offload, matching ErrNoSets", err)
	}
	run(t, "nft", "add", "table", "inet", DefaultTable)
	run(t, "nft", "add", "set", "inet", DefaultTable, "ports4", "{ type ipv4_addr . inet_service; flags timeout; }")
	_, err = Open(Config{})
	t.Logf("Open with a set of another type: %v", err)
	if err == nil || !errors.Is(err, ErrNoSets) || !strings.Contains(err.Error(), "is not { type ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service; flags dynamic,timeout; }") {
		t.Errorf("Open with a set of another type: %v", err)
	}
	run(t, "nft", "delete", "table", "inet", DefaultTable)
	rules(t, "add", "--queue", "0", "--offload")
	for _, c := range []Config{{Timeout: -time.Second}, {Timeout: time.Microsecond}, {Timeout: MaxTimeout + time.Millisecond}, {Buffer: -1}} {
		if o, err := Open(c); err == nil {
			o.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
	if _, err := Open(Config{Table: "nosuchtable"}); err == nil || !strings.Contains(err.Error(), "table inet nosuchtable") {
		t.Errorf("Open with another table name: %v", err)
	}
	o, err := Open(Config{})
	if err != nil {
		t.Fatalf("Open after rules.sh add --offload: %v", err)
	}
	if o.Timeout() != DefaultTimeout {
		t.Errorf("default timeout %v, want %v", o.Timeout(), DefaultTimeout)
	}
	o.Close()
}

// TestAddNoAllocs: Add allocates nothing, whether the key is taken or
// counted as lost; a nil Offloader ignores keys.
func TestAddNoAllocs(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	o := open(t, Config{Timeout: MaxTimeout, Buffer: 8})
	k := key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1000, 2000)
	if a := testing.AllocsPerRun(1000, func() { o.Add(k, perMinute5) }); a != 0 {
		t.Errorf("Add: %v allocations, want 0", a)
	}
	o.Close()
	if a := testing.AllocsPerRun(1000, func() { o.Add(k, perMinute5) }); a != 0 {
		t.Errorf("Add after Close: %v allocations, want 0", a)
	}
	var nilO *Offloader
	nilO.Add(k, perMinute5)
	if s := nilO.Stats(); s != (Stats{}) {
		t.Errorf("nil Offloader stats %+v", s)
	}
}

// TestAddConcurrent: several goroutines (one per queue) add at once.
func TestAddConcurrent(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	o := open(t, Config{Timeout: MaxTimeout})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", uint16(1000+g), uint16(i+1)), perMinute5)
				_ = o.Stats()
			}
		}()
	}
	wg.Wait()
	waitStats(t, o, "every key handled", func(s Stats) bool { return s.Offloaded+s.Lost+s.Errors == 2000 })
	if s := o.Stats(); s.Errors != 0 {
		t.Errorf("stats %+v: kernel refusals", s)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if l := listSet(t, "ports4"); strings.Contains(l, "elements =") {
		t.Errorf("elements left after Close:\n%.500s", l)
	}
}

// TestClear: Clear deletes the live elements and the Offloader goes on: a
// flow reported again is offloaded again.
func TestClear(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	o := open(t, Config{Timeout: MaxTimeout})
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1000, 2000), perMinute5)
	waitStats(t, o, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	if err := o.Clear(); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	if l := listSet(t, "ports4"); strings.Contains(l, "elements =") {
		t.Errorf("set ports4 after Clear:\n%s", l)
	}
	if s := o.Stats(); s.Active != 0 {
		t.Errorf("Active after Clear: %d", s.Active)
	}
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.2", 1000, 2000), perMinute5)
	waitStats(t, o, "the element again", func(s Stats) bool { return s.Offloaded == 2 })
	if l := listSet(t, "ports4"); !strings.Contains(l, "127.0.0.1") {
		t.Errorf("set ports4 after a new Add:\n%s", l)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Clear(); err != nil {
		t.Errorf("Clear after Close: %v", err)
	}
}
