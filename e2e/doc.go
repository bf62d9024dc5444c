// Package e2e holds packetshaper's end-to-end tests: they build the real
// binaries (cmd/packetshaper, internal/cmd/psend), create network namespaces joined by
// a veth pair, divert traffic with scripts/rules.sh and check what arrives.
//
// The tests need root (CI runs them as root) and skip with a message
// otherwise. Traffic only flows between the namespaces a test creates; every
// namespace, rule and process is removed in t.Cleanup, also on failure.
// Should the test process itself die, the processes it started die with it
// (Pdeathsig), and the next run removes the namespaces it left (named
// pse-PID-…, removed once that pid is gone).
//
//	sudo go test ./e2e/ -v
package e2e
