// Package failopen counts the packets the kernel passed without a verdict
// because their NFQUEUE queue was full (fail-open), per queue, and logs
// when that starts and ends: a Monitor over the queues of package nfq.
// QueueRules lists the nf_tables rules that send packets to NFQUEUE, with
// their counters, and UnservedQueues the queues they send to that nobody
// serves.
//
// It is the package that reads nf_tables (through github.com/google/nftables:
// rule counters, never written) and samples the kernel's table of queues
// (nfq.QueueTable). It imports nfq's public types; nfq does not know it: a
// Monitor registers for a queue's stop with nfq.Queue.OnStop.
//
// A package of its own, not internal/: like nfq, whose companion it is, it
// is a library with a public surface (the daemon uses it; so can any other
// program serving NFQUEUE queues with nfq, see ExampleMonitor).
package failopen
