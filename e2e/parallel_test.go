package e2e

import (
	"flag"
	"strconv"
	"testing"
)

// parallel marks t as a test that may run beside other e2e tests
// (defaultParallel at once): one that mostly waits (low packet rates,
// setup, rules scripts, the kernel's answers) and whose assertions are
// counts that a slower sender or shaper does not change. Each test has its
// own network namespaces, and in them its own veth pair, addresses,
// iptables and nft rules, NFQUEUE queues (per network namespace), loopback
// ports and metrics address; a control socket is given per test
// (t.TempDir) or is the default, which a second shaper finds in use and
// runs without. The flood, throughput, pacing, memory, offload and global
// (Redis) tests stay serial: go test runs them first, alone, then the
// parallel ones.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// defaultParallel is how many tests marked parallel run at once, unless
// go test's -parallel says otherwise (TestMain sets it: go test's own
// default, GOMAXPROCS, is 2 on the CI's machine, where these tests mostly
// wait). Five at a time, the 59 of them took 78 s, three at a time 126 s,
// on a shared 2-core machine at load 4 to 6, every one passing.
const defaultParallel = 5

// setParallel makes -test.parallel defaultParallel unless it was given.
// It parses the flags (TestMain may; m.Run reads -test.parallel after).
func setParallel() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(defaultParallel))
	}
}
