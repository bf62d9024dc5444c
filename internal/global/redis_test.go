package global

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// The tests run real redis-server processes (testutil.StartRedis: the
// Debian package, which scripts/test.sh installs) on loopback ports of
// their own, and stop them when they end.

// cpuSeconds is the CPU time the server has used (INFO cpu).
func cpuSeconds(t testing.TB, s *testutil.Redis) float64 {
	t.Helper()
	var sum float64
	for _, l := range strings.Split(s.Cli("info", "cpu"), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, _ := strconv.ParseFloat(v, 64)
			sum += x
		}
	}
	return sum
}

// clientCommands is how many commands clients sent the server (by its
// commandstats): EVALSHA, EVAL, SCRIPT, PING, not the calls the scripts
// make inside (which INFO's total_commands_processed counts too) nor the
// test's own INFO.
func clientCommands(t testing.TB, s *testutil.Redis) int64 {
	t.Helper()
	var n int64
	for _, l := range strings.Split(s.Cli("info", "commandstats"), "\n") {
		for _, c := range []string{"evalsha", "eval", "script|load", "script", "ping"} {
			p := "cmdstat_" + c + ":calls="
			if strings.HasPrefix(l, p) {
				v, _, _ := strings.Cut(strings.TrimPrefix(l, p), ",")
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// startCluster starts three redis-servers in cluster mode and joins them
// into a Redis Cluster of three masters (redis-cli --cluster create),
// waiting until every node reports cluster_state:ok.
func startCluster(t testing.TB) []*testutil.Redis {
	t.Helper()
	var nodes []*testutil.Redis
	var addrs []string
	for range 3 {
		s := testutil.NewRedis(t)
		s.Args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"),
			"--cluster-node-timeout", "2000"}
		s.Start()
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range nodes {
		var info string
		if !testutil.WaitFor(t, 20*time.Second, func() bool {
			info = n.Cli("cluster", "info")
			return strings.Contains(info, "cluster_state:ok")
		}) {
			t.Fatalf("the cluster is not ok on %s:\n%s", n.Addr(), info)
		}
	}
	return nodes
}

// rawClient is a plain go-redis client for the script tests.
func rawClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// runScript runs the lease script once.
func runScript(t testing.TB, c redis.Scripter, key string, a askArgs) reply {
	t.Helper()
	v, err := script.Run(context.Background(), c, scriptKeys(key), a.argv()...).Result()
	if err != nil {
		t.Fatalf("lease script: %v", err)
	}
	r, err := parseReply(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fmtReply(r reply) string {
	return fmt.Sprintf("{granted %d hosts %d cap %d wait %dµs left %dµs own %.1f total %.1f burst %d}", r.granted, r.hosts, r.cap, r.waitUs, r.leftUs, r.own, r.total, r.burst)
}
