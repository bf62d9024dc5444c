package e2e

import "testing"

// parallel marks t as a test that may run beside other e2e tests (go test
// -parallel N; scripts/test.sh and scripts/stress-tests.sh use 5): one
// that mostly waits (low packet rates, setup, rules scripts, the kernel's
// answers) and whose assertions are counts that a slower sender or shaper
// does not change. Each test has its own network namespaces, and in them
// its own veth pair, addresses, iptables and nft rules, NFQUEUE queues
// (per network namespace), loopback ports and metrics address; a control
// socket is given per test (t.TempDir) or is the default, which a second
// shaper finds in use and runs without. The flood, throughput, pacing,
// memory, offload and global (Redis) tests stay serial: go test runs them
// first, alone, then the parallel ones.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
}
