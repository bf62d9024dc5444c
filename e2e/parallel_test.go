package e2e

import (
	"flag"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testutil"
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
	parallelTests.Store(t.Name(), true)
	t.Parallel()
}

// parallelTests holds the names of the tests marked parallel.
var parallelTests sync.Map

// needExclusiveUnlessParallel skips t, unless the run has the machine to
// itself (testutil.NeedExclusive), when neither t nor a test it is a
// subtest of is marked parallel: the serial tests are the floods,
// throughput, pacing, memory, offload and global ones, whose counts hold
// only without other packages' tests beside them (plain go test ./...
// runs packages side by side). newTopo and newRouted call it.
func needExclusiveUnlessParallel(t *testing.T) {
	t.Helper()
	name := t.Name()
	for {
		if _, ok := parallelTests.Load(name); ok {
			return
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			break
		}
		name = name[:i]
	}
	testutil.NeedExclusive(t, "a serial e2e test: a flood, throughput, pacing, memory, offload or global test")
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
