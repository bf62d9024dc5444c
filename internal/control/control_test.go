package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeHandler serves n flows: flow i of queue i%2, rule "r<i%3>", with i%7
// drops and i%11 packets more than that.
type fakeHandler struct {
	n        int
	returned chan error // if not nil, gets what Flows returns
}

func (h *fakeHandler) Status() Status {
	return Status{Version: "v9", PID: 42, Policy: "p.toml", Mode: "fail-open",
		Queues: []Queue{{Queue: 0, Bound: true, Queued: 3, MaxLen: 100, Fill: 0.03, Packets: 10}},
		Rules:  []Rule{{Name: "r0", Action: "limit", Algorithm: "token-bucket", Rate: 5, Unit: "packets", Burst: 2, Packets: 10}}}
}

func fakeFlow(i int) Flow {
	return Flow{Queue: uint16(i % 2), Rule: fmt.Sprintf("r%d", i%3), Key: fmt.Sprintf("udp 10.0.0.%d:1 > 10.0.0.9:2", i),
		Dropped: uint64(i % 7), Packets: uint64(i%7 + i%11), Accepted: uint64(i % 11), Unit: "packets"}
}

func (h *fakeHandler) Flows(ctx context.Context, rule string, emit func(*Flow) error) (err error) {
	if h.returned != nil {
		defer func() { h.returned <- err }()
	}
	if rule == "nosuch" {
		return errors.New(`no rule "nosuch" in the policy`)
	}
	var f Flow
	for i := range h.n {
		f = fakeFlow(i)
		if rule != "" && f.Rule != rule {
			continue
		}
		if err := emit(&f); err != nil {
			return err
		}
		f = Flow{} // the handler reuses its Flow: the server must not keep it
	}
	return nil
}

func serve(t *testing.T, h Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "ps.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, ln, h, t.Logf); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

func TestStatusAndFlows(t *testing.T) {
	h := &fakeHandler{n: 1000}
	path := serve(t, h)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %s: %v, %v; want a socket of mode 0600", path, fi.Mode(), err)
	}
	st, err := GetStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := h.Status(); st.Version != want.Version || st.PID != 42 || !slices.Equal(st.Queues, want.Queues) || len(st.Rules) != 1 || st.Rules[0] != want.Rules[0] {
		t.Errorf("status = %+v, want %+v", st, want)
	}

	// Everything, in the handler's order.
	var got []Flow
	end, err := ListFlows(path, Request{}, func(f *Flow) error { got = append(got, *f); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || end.Flows != 1000 || end.Listed != 1000 {
		t.Fatalf("listed %d flows, end %+v; want 1000", len(got), end)
	}
	for i, f := range got {
		if f != fakeFlow(i) {
			t.Fatalf("flow %d = %+v, want %+v", i, f, fakeFlow(i))
		}
	}

	// Top 5 by drops and by packets, of one rule, against a sort of all.
	for _, sort := range []string{"", SortDrops, SortPackets} {
		var all []Flow
		for i := range 1000 {
			if f := fakeFlow(i); f.Rule == "r1" {
				all = append(all, f)
			}
		}
		top := newTop(1, sort) // its order
		slices.SortFunc(all, func(a, b Flow) int { return top.first(&a, &b) })
		got = got[:0]
		end, err := ListFlows(path, Request{Rule: "r1", Top: 5, Sort: sort}, func(f *Flow) error { got = append(got, *f); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, all[:5]) || end.Flows != 5 || end.Listed != len(all) {
			t.Errorf("top 5 by %q: %+v (end %+v), want %+v", sort, got, end, all[:5])
		}
	}

	// Errors: the handler's, and bad requests.
	if _, err := ListFlows(path, Request{Rule: "nosuch"}, func(*Flow) error { return nil }); err == nil || !strings.Contains(err.Error(), `no rule "nosuch"`) {
		t.Errorf("unknown rule: %v", err)
	}
	if _, err := ListFlows(path, Request{Sort: "bytes"}, func(*Flow) error { return nil }); err == nil || !strings.Contains(err.Error(), "unknown sort") {
		t.Errorf("bad sort: %v", err)
	}
	for req, want := range map[string]string{
		`{"cmd":"reboot"}` + "\n":         `{"error":"unknown command \"reboot\" (want status or flows)"}`,
		`nonsense` + "\n":                 `{"error":"bad request: `,
		`{"cmd":"flows","top":-1}` + "\n": `{"error":"top must not be negative, not -1"}`,
		strings.Repeat("x", 5000) + "\n":  `{"error":"request line too long"}`,
		`{"cmd":"status"}` + "\n":         `{"status":{"version":"v9"`,
		// Most drops (6: i%7 == 6), then most packets (i%11 == 10), then
		// the lowest queue and key: i = 230 of 230, 461, 692, 923.
		`{"cmd":"flows","rule":"r2","top":1}` + "\n": `{"flow":{"queue":0,"rule":"r2","key":"udp 10.0.0.230:1 > 10.0.0.9:2"`,
	} {
		if got := raw(t, path, req); !strings.HasPrefix(got, want) {
			t.Errorf("request %.40q: answer %.200q, want it to start with %q", req, got, want)
		}
	}
}

// raw sends a request line and returns the whole answer.
func raw(t *testing.T, path, req string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String()
		}
	}
}

// TestClientGone: a client that goes away mid-listing ends the handler's
// listing (its emit fails), and other clients are served meanwhile.
func TestClientGone(t *testing.T) {
	h := &fakeHandler{n: 1 << 40, returned: make(chan error, 1)}
	path := serve(t, h)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(`{"cmd":"flows"}` + "\n"))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := GetStatus(path); err != nil {
		t.Errorf("status during a listing: %v", err)
	}
	c.Close()
	select {
	case err := <-h.returned:
		if err == nil {
			t.Error("the listing ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the listing goes on after its client left")
	}
}

// TestListen: a stale socket is replaced, a live one is not, nor a file;
// closing the listener removes the socket.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ps.sock")
	// A stale socket: bound, then its listener gone without removing it.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	if _, err := Listen(path); !errors.Is(err, ErrInUse) || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("over a live socket: %v, want ErrInUse", err)
	}
	ln.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close: %v, want the socket gone", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a file: %v", err)
	}
	// Client errors name what to do.
	if _, err := GetStatus(filepath.Join(dir, "none.sock")); err == nil || !strings.Contains(err.Error(), "is packetshaper running") {
		t.Errorf("no socket: %v", err)
	}
	ln2, _ := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	ln2.SetUnlinkOnClose(false)
	ln2.Close()
	if _, err := GetStatus(path); err == nil || !strings.Contains(err.Error(), "nobody answers") {
		t.Errorf("stale socket: %v", err)
	}
}

func TestDefaultPath(t *testing.T) {
	for q, want := range map[string]string{
		"0": "/run/packetshaper/packetshaper.sock", "3": "/run/packetshaper/packetshaper-3.sock", "0-3": "/run/packetshaper/packetshaper-0-3.sock",
	} {
		if got := DefaultPath(q); got != want {
			t.Errorf("DefaultPath(%q) = %q, want %q", q, got, want)
		}
	}
}
