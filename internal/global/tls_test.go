package global

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/internal/testcerts"
	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/shaper"
)

// tlsFiles are the client side of c: its CA as the roots, its client
// certificate (Open reads them).
func tlsFiles(c testcerts.Files) *TLSFiles {
	return &TLSFiles{CAFile: c.CA, CertFile: c.ClientCert, KeyFile: c.ClientKey}
}

// TestTLS: the client takes leases over TLS (with a client certificate);
// a client that does not trust the server's CA gets nothing, falls back,
// and says why in its fallback line.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.Write(t, dir, "")
	other := testcerts.Write(t, dir, "other-")
	_, addr := testutil.StartRedisTLS(t, certs)
	limit := shaper.Config{Rate: 1000, Burst: 100, GlobalSlack: 0.1}

	h := newHost(t, Config{Addrs: []string{addr}, TLSFiles: tlsFiles(certs), Timeout: 200 * time.Millisecond}, limit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.drive(ctx, []flows.Key{key(7)}, 500, 0)
	for deadline := time.Now().Add(5 * time.Second); h.r.Stats().Granted < 100; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no grants over TLS: %+v, last error %q", h.r.Stats(), h.c.Stats().LastError)
		}
	}
	if st := h.r.Stats(); st.Fallback {
		t.Errorf("fallback over TLS: %+v, last error %q", st, h.c.Stats().LastError)
	}

	bad := newHost(t, Config{Addrs: []string{addr}, TLSFiles: tlsFiles(other), Timeout: 200 * time.Millisecond}, limit)
	go bad.drive(ctx, []flows.Key{key(8)}, 500, 0)
	for deadline := time.Now().Add(5 * time.Second); !bad.r.Stats().Fallback; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a client with the wrong CA does not fall back: %+v", bad.r.Stats())
		}
	}
	const why = "x509: certificate signed by unknown authority"
	if st := bad.r.Stats(); st.Granted != 0 || !strings.Contains(bad.c.Stats().LastError, why) {
		t.Errorf("wrong CA: %+v, last error %q, want %q", st, bad.c.Stats().LastError, why)
	}
	// The rule falls back before the client logs it (enterFallback):
	// the line may come a moment after (seen under go test ./...).
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(bad.log.String(), "does not answer") })
	if log := bad.log.String(); !strings.Contains(log, why) || strings.Count(log, "does not answer") != 1 {
		t.Errorf("wrong CA: the fallback line does not say why:\n%s", log)
	}
}

// aclUser is the ACL of the README: packetshaper's user may run its
// script (and the commands the script runs) on its key prefix, and
// nothing else.
func aclUser(prefix, password string) []string {
	return []string{"ACL", "SETUSER", "packetshaper", "reset", "on", ">" + password, "~" + prefix + "*", "resetchannels", "-@all",
		"+evalsha", "+script|load", "+ping",
		"+time", "+hlen", "+hmget", "+hset", "+hdel", "+del", "+pexpire",
		"+zadd", "+zrem", "+zscore", "+zcard", "+zcount", "+zrangebyscore"}
}

// TestACL: under the ACL of the README, packetshaper's client takes
// leases as usual; the same user's FLUSHALL, SET, EVAL, a write outside its
// prefix or a CONFIG SET are refused.
func TestACL(t *testing.T) {
	s := testutil.StartRedis(t)
	if out := s.Cli(aclUser("ps:", "s3cret")...); out != "OK" {
		t.Fatalf("ACL SETUSER: %s", out)
	}
	limit := shaper.Config{Rate: 1000, Burst: 100, GlobalSlack: 0.1}
	// (A generous timeout: the point is the permissions, and this
	// machine is shared.)
	h := newHost(t, Config{Addrs: []string{s.Addr()}, Username: "packetshaper", Password: "s3cret", KeyPrefix: "ps:",
		Timeout: 200 * time.Millisecond}, limit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.drive(ctx, []flows.Key{key(9)}, 2000, 0)
	for deadline := time.Now().Add(5 * time.Second); h.r.Stats().Granted < 500; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no grants under the ACL: %+v, last error %q", h.r.Stats(), h.c.Stats().LastError)
		}
	}
	cancel()
	if st := h.r.Stats(); st.Fallback || strings.Contains(h.c.Stats().LastError, "NOPERM") {
		t.Errorf("under the ACL: %+v, last error %q", st, h.c.Stats().LastError)
	}
	if n := s.Cli("eval", "return #redis.call('keys', 'ps:*}')", "0"); n != "1" {
		t.Errorf("%s keys under ps:, want 1", n)
	}

	u := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "packetshaper", Password: "s3cret", Protocol: 2, DisableIdentity: true})
	defer u.Close()
	bg := context.Background()
	for _, c := range []struct {
		name string
		cmd  []any
	}{
		{"flushall", []any{"flushall"}},
		{"flushdb", []any{"flushdb"}},
		{"set in the prefix", []any{"set", "ps:x", "1"}},
		{"hset outside the prefix", []any{"hset", "other:{x}", "tk", "1e9"}},
		{"eval", []any{"eval", "return redis.call('flushall')", "0"}},
		{"script flush", []any{"script", "flush"}},
		{"config set", []any{"config", "set", "save", ""}},
		{"keys", []any{"keys", "*"}},
	} {
		err := u.Do(bg, c.cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s by packetshaper's user: %v, want NOPERM", c.name, err)
		}
	}
	if n := s.Cli("eval", "return #redis.call('keys', 'ps:*}')", "0"); n != "1" {
		t.Errorf("%s keys under ps: after the refused writes, want 1", n)
	}
	// The script's every path runs under the ACL: a key flooded with
	// fake hosts (by another user) is cleaned up by packetshaper's.
	name := rawClient(t, s.Addr()).Keys(bg, "ps:*}").Val()[0]
	var zs []redis.Z
	now := storeNow(t, u)
	for i := range maxHosts + 100 {
		zs = append(zs, redis.Z{Score: float64(now), Member: "fake" + strconv.Itoa(i)})
	}
	rawClient(t, s.Addr()).ZAdd(bg, scriptKeys(name)[1], zs...)
	// (the asker, and the real host if it asked again since)
	if r := runScript(t, u, name, tb("a", 0, 0, 1)); r.hosts > 2 {
		t.Errorf("after the flood: %s, want at most 2 hosts", fmtReply(r))
	}
}
