package daemon

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// closed reports whether a global rule was closed (it hands out no lease).
func closed(g shaper.Global) bool {
	k := flows.Key{Family: 4, Mode: flows.Src}
	return g.Lease(&k) == nil
}

// TestGlobalsAcrossReloads: an unchanged global rule keeps its leases
// (the same global.Rule) across a reload, a changed one gets new ones and
// the old are closed once the old policy is gone; a changed [redis] table
// means a new connection and new leases for every rule; no global rule, no
// connection. The store need not be up for any of it.
func TestGlobalsAcrossReloads(t *testing.T) {
	const redisA = "[redis]\naddrs = [\"127.0.0.1:1\"]\n"
	const redisB = "[redis]\naddrs = [\"127.0.0.1:2\"]\n"
	rules := rule("a", "", "pps = 10", `scope = "global"`) + rule("b", "", "pps = %s", `scope = "global"`) + rule("l", "", "pps = 1")
	gl := newGlobals(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer gl.close()
	prep := func(text string) (shaper.Policy, func()) {
		t.Helper()
		c := compile(t, text)
		p, done, err := gl.prepare(c.Policy(), c)
		if err != nil {
			t.Fatal(err)
		}
		return p, done
	}
	p1, _ := prep(redisA + strings.Replace(rules, "%s", "20", 1))
	if p1.Rules[0].Global == nil || p1.Rules[1].Global == nil || p1.Rules[2].Global != nil {
		t.Fatalf("globals attached: %v %v %v", p1.Rules[0].Global, p1.Rules[1].Global, p1.Rules[2].Global)
	}
	client1 := gl.client
	p2, done2 := prep(redisA + strings.Replace(rules, "%s", "30", 1))
	if p2.Rules[0].Global != p1.Rules[0].Global {
		t.Error("the unchanged rule a got new leases")
	}
	if p2.Rules[1].Global == p1.Rules[1].Global {
		t.Error("the changed rule b kept its leases")
	}
	if closed(p1.Rules[1].Global) {
		t.Error("b's old leases closed before the old policy is gone")
	}
	done2()
	if !closed(p1.Rules[1].Global) || closed(p2.Rules[0].Global) {
		t.Error("after the swap: b's old leases should be closed, a's kept")
	}
	p3, done3 := prep(redisB + strings.Replace(rules, "%s", "30", 1))
	if gl.client == client1 || p3.Rules[0].Global == p2.Rules[0].Global {
		t.Error("a new [redis] table: want a new connection and new leases")
	}
	done3()
	if !closed(p2.Rules[0].Global) || !closed(p2.Rules[1].Global) {
		t.Error("the old connection's rules are not closed")
	}
	if _, _, ok := gl.stats(); !ok {
		t.Error("no stats with global rules")
	}
	_, done4 := prep(rule("l", "", "pps = 1"))
	done4()
	if _, _, ok := gl.stats(); ok || gl.client != nil {
		t.Error("a connection without global rules")
	}
}

// TestGlobalsPasswordFile: the password file is read at start; one that
// cannot be read is a one-line error naming it.
func TestGlobalsPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pw := writeFile(t, dir, "pw", "s3cret\n", 0o600)
	gl := newGlobals(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer gl.close()
	text := "[redis]\naddrs = [\"127.0.0.1:1\"]\npassword-file = %q\n" + rule("a", "", "pps = 10", `scope = "global"`)
	c := compile(t, strings.Replace(text, "%q", `"`+pw+`"`, 1))
	if _, _, err := gl.prepare(c.Policy(), c); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	c = compile(t, strings.Replace(text, "%q", `"`+missing+`"`, 1))
	_, _, err := gl.prepare(c.Policy(), c)
	if err == nil || !strings.Contains(err.Error(), "redis.password-file: cannot read "+missing+": no such file or directory") || strings.Contains(err.Error(), "\n") {
		t.Errorf("missing password file: %v", err)
	}
}
