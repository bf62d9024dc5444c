package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// ctlHandler serves a status and five flows; flow i dropped i%3 packets of
// 10+i.
type ctlHandler struct{}

func (ctlHandler) Status() control.Status {
	return control.Status{Version: "v7", PID: 9, Started: time.Unix(1_700_000_000, 0).UTC(), UptimeSecs: 75, Policy: "/etc/p.toml", Mode: "fail-open",
		Reloads: control.Reloads{OK: 1, Last: &control.Reload{Time: time.Unix(1_700_000_050, 0).UTC(), OK: true, KeptState: []string{"web"}}},
		Queues:  []control.Queue{{Queue: 0, Bound: true, Queued: 12, MaxLen: 8192, Fill: 12.0 / 8192, Packets: 100, Accepted: 90, Dropped: 10, FailOpenPassed: 3, FailOpenExact: true, Flows: 5}},
		Rules: []control.Rule{{Name: "web", Action: "limit", Algorithm: "token-bucket", Rate: 100, Unit: "packets", Burst: 5, Key: "5tuple", Packets: 100, Accepted: 90, Dropped: 10, Flows: 5},
			{Name: "rest", Action: "accept"}}}
}

func (ctlHandler) Flows(_ context.Context, rule string, emit func(*control.Flow) error) error {
	if rule == "nosuch" {
		return fmt.Errorf("no rule %q in the policy", rule)
	}
	for i := range 5 {
		f := control.Flow{Rule: "web", Key: fmt.Sprintf("udp 10.0.0.%d:1000 > 10.0.0.9:9000", i), Packets: uint64(10 + i), Dropped: uint64(i % 3),
			Accepted: uint64(10 + i - i%3), Left: 0.5, Unit: "packets", IdleSecs: 1.25, Expired: i == 4}
		if err := emit(&f); err != nil {
			return err
		}
	}
	return nil
}

func ctlServer(t *testing.T) string { return serveCtl(t, ctlHandler{}) }

// serveCtl serves h on a control socket in a temporary folder until the
// test ends, and returns the socket's path.
func serveCtl(t *testing.T, h control.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ps.sock")
	ln, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { control.Serve(ctx, ln, h, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

func TestFlowsCommand(t *testing.T) {
	sock := ctlServer(t)
	flows := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append([]string{"flows", "--control-socket", sock}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	keys := func(out string) (ks []string) {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ks = append(ks, strings.Fields(l)[3]) // "10.0.0.N:1000"
		}
		return ks
	}
	// Most drops first (2: flow 2; 1: flows 4 and 1, more packets first).
	out, errs, code := flows()
	if code != 0 || errs != "" {
		t.Fatalf("flows: %d, %s", code, errs)
	}
	if got := strings.Join(keys(out), " "); got != "10.0.0.2:1000 10.0.0.4:1000 10.0.0.1:1000 10.0.0.3:1000 10.0.0.0:1000" {
		t.Errorf("flows by drops: %s\n%s", got, out)
	}
	if !strings.HasPrefix(out, "QUEUE  RULE  KEY") || !strings.Contains(out, "1.3s (expired)") || !strings.Contains(out, "0.50") {
		t.Errorf("flows table:\n%s", out)
	}
	out, _, _ = flows("--sort", "packets", "--top", "2")
	if got := strings.Join(keys(out), " "); got != "10.0.0.4:1000 10.0.0.3:1000" {
		t.Errorf("flows --sort packets --top 2: %s\n%s", got, out)
	}
	out, _, _ = flows("--sort", "none", "--json")
	var n int
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var f control.Flow
		if err := json.Unmarshal([]byte(l), &f); err != nil || f.Key != fmt.Sprintf("udp 10.0.0.%d:1000 > 10.0.0.9:9000", i) {
			t.Errorf("--json line %d: %q: %v", i, l, err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("--json: %d lines, want 5", n)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rule", "nosuch"}, 1, `packetshaper flows: flows: no rule "nosuch" in the policy`},
		{[]string{"--sort", "bytes"}, 2, "--sort must be drops, packets or none"},
		{[]string{"--top", "-1"}, 2, "--top must not be negative"},
		{[]string{"--top", "3", "--sort", "none"}, 2, "--top needs an order"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		_, errs, code := flows(tc.args...)
		if code != tc.code || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("flows %q: %d, %q; want %d and one line with %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	var out2, errb bytes.Buffer
	if code := run([]string{"flows", "--queue", "9"}, &out2, &errb); code != 1 || !strings.Contains(errb.String(), "packetshaper-9.sock") || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("flows --queue 9 with no shaper: %d, %q", code, errb.String())
	}
}

func TestStatusCommand(t *testing.T) {
	sock := ctlServer(t)
	var out, errb bytes.Buffer
	if code := run([]string{"status", "--control-socket", sock}, &out, &errb); code != 0 {
		t.Fatalf("status: %d %s", code, errb.String())
	}
	wantLines(t, "status", out.String(),
		"packetshaper v7, pid 9, up 1m15s (since 2023-11-14T22:13:20Z)",
		"policy: /etc/p.toml; fail-open; offload off",
		"reloads: 1 ok, 0 failed; last at 2023-11-14T22:14:10Z, ok, kept state: web",
		"12/8192", "token-bucket 100 packets/s burst 5, polices, key 5tuple")
	out.Reset()
	if code := run([]string{"status", "--control-socket", sock, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("status --json: %d %s", code, errb.String())
	}
	var st control.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Version != "v7" || len(st.Queues) != 1 || st.Queues[0].Queued != 12 {
		t.Errorf("status --json: %+v, %v", st, err)
	}
}
