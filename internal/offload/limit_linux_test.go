package offload

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables/expr"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestKernelLimit: the kernel's limit statement is never stricter than the
// rule's bucket, and a limit that is none is refused.
func TestKernelLimit(t *testing.T) {
	for _, c := range []struct {
		l    shaper.OffloadLimit
		want expr.Limit
	}{
		{shaper.OffloadLimit{Rate: 100, Burst: 20}, expr.Limit{Type: expr.LimitTypePkts, Over: true, Rate: 100, Unit: expr.LimitTimeSecond, Burst: 20}},
		{shaper.OffloadLimit{Rate: 1.5, Burst: 2.5}, expr.Limit{Type: expr.LimitTypePkts, Over: true, Rate: 90, Unit: expr.LimitTimeMinute, Burst: 3}},
		{shaper.OffloadLimit{Rate: 1.0 / 60, Burst: 5}, expr.Limit{Type: expr.LimitTypePkts, Over: true, Rate: 1, Unit: expr.LimitTimeMinute, Burst: 5}},
		{shaper.OffloadLimit{Rate: 125000, Burst: 12500, Bytes: true}, expr.Limit{Type: expr.LimitTypePktBytes, Over: true, Rate: 125000, Unit: expr.LimitTimeSecond, Burst: 12500}},
		{shaper.OffloadLimit{Rate: 1e-9, Burst: 1}, expr.Limit{Type: expr.LimitTypePkts, Over: true, Rate: 1, Unit: expr.LimitTimeWeek, Burst: 1}},
	} {
		got, ok := kernelLimit(c.l)
		if !ok || got != c.want {
			t.Errorf("kernelLimit(%+v) = %+v, %v; want %+v", c.l, got, ok, c.want)
		}
		if r := float64(got.Rate) / float64(got.Unit); r < c.l.Rate {
			t.Errorf("kernelLimit(%+v): rate %v/s, stricter than the rule", c.l, r)
		}
	}
	for _, l := range []shaper.OffloadLimit{{}, {Rate: 1}, {Burst: 1}, {Rate: -1, Burst: 1}} {
		if _, ok := kernelLimit(l); ok {
			t.Errorf("kernelLimit(%+v) ok, want refused", l)
		}
	}
}

// TestOpenFlushes: elements a killed packetshaper left in the sets go when
// the next one opens them, not when they expire.
func TestOpenFlushes(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--offload")
	run(t, "nft", "add", "element", "inet", DefaultTable, "ports4", "{ 127.0.0.1 . 127.0.0.1 . udp . 40001 . 9999 timeout 10s }")
	run(t, "nft", "add", "element", "inet", DefaultTable, "noports6", "{ ::1 . ::2 . gre timeout 10s }")
	open(t, Config{})
	for _, s := range setNames {
		if l := listSet(t, s); strings.Contains(l, "elements =") {
			t.Errorf("set %s after Open still holds elements:\n%s", s, l)
		}
	}
}

// TestRefreshWhileDropping: an element whose limit keeps dropping is added
// again before it expires, and stays; once its flow stops, it goes within
// the timeout. A flow under its limit is not held: its element goes.
func TestRefreshWhileDropping(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", fmt.Sprint(testPort), "--offload")
	const timeout = 800 * time.Millisecond
	o := open(t, Config{Timeout: timeout})
	dst := net.JoinHostPort("127.0.0.1", fmt.Sprint(testPort))
	r := newReceiver(t, "udp4", dst)
	const flood, calm = 40011, 40012
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.1", flood, testPort), perMinute5)
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.1", calm, testPort), perMinute5)
	waitStats(t, o, "the elements", func(s Stats) bool { return s.Offloaded == 2 })
	elem := func(port int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`127\.0\.0\.1 \. 127\.0\.0\.1 \. udp \. %d \. %d `, port, testPort))
	}
	// The flood goes on for 3 timeouts: 10 packets every 50 ms.
	start := time.Now()
	for time.Since(start) < 3*timeout {
		send(t, "udp4", "127.0.0.1", dst, flood, 10)
		time.Sleep(50 * time.Millisecond)
	}
	l := listSet(t, "ports4")
	if !elem(flood).MatchString(l) {
		t.Errorf("the flooding flow's element went after %v, with a timeout of %v:\n%s", time.Since(start), timeout, l)
	}
	if elem(calm).MatchString(l) {
		t.Errorf("the calm flow's element is still there after %v (timeout %v):\n%s", time.Since(start), timeout, l)
	}
	if got := r.count(flood); got != 5 {
		t.Errorf("the flooding flow got %d packets through, want its burst, 5", got)
	}
	if s := o.Stats(); s.Refreshed == 0 || s.Errors != 0 {
		t.Errorf("stats %+v: want refreshes, no errors", s)
	}
	// The flood stops: its element goes within the timeout (and a tick).
	stop := time.Now()
	for elem(flood).MatchString(listSet(t, "ports4")) {
		if time.Since(stop) > timeout+timeout/2+time.Second {
			t.Fatalf("element still there %v after the flood stopped (timeout %v)", time.Since(stop), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the element went %v after the flood's last packet (timeout %v)", time.Since(stop), timeout)
}

// TestLimitBytes: a rule limited in bytes holds its offloaded tuple to a
// bucket of bytes (IP length): a burst of 200 bytes lets 5 datagrams of 40
// bytes through (20 IP + 8 UDP + 12 payload).
func TestLimitBytes(t *testing.T) {
	newNetns(t)
	rules(t, "add", "--queue", "0", "--chain", "OUTPUT", "--proto", "udp", "--dport", fmt.Sprint(testPort), "--offload")
	o := open(t, Config{Timeout: MaxTimeout})
	dst := net.JoinHostPort("127.0.0.1", fmt.Sprint(testPort))
	r := newReceiver(t, "udp4", dst)
	const sport, n = 40021, 20
	o.Add(key(flows.ProtoUDP, "127.0.0.1", "127.0.0.1", sport, testPort), shaper.OffloadLimit{Rate: 1.0 / 60, Burst: 200, Bytes: true})
	waitStats(t, o, "the element", func(s Stats) bool { return s.Offloaded == 1 })
	if l := listSet(t, "ports4"); !strings.Contains(l, "limit rate over 1 bytes/minute burst 200 bytes") {
		t.Errorf("no byte limit in the element:\n%s", l)
	}
	send(t, "udp4", "127.0.0.1", dst, sport, n)
	send(t, "udp4", "127.0.0.1", dst, sport+1, n) // not offloaded: all arrive, after the others
	if other, got := r.wait(sport+1, n), r.count(sport); got != 5 || other != n {
		t.Errorf("a burst of 200 bytes let %d datagrams of 40 bytes through, want 5 (another tuple: %d of %d)", got, other, n)
	}
}
