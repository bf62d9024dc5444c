package failopen

// The names of the fail-open counts, declared once: the attributes of the
// Monitor's log lines, and the keys of the daemon's stats line and metrics
// (its counters' table uses these). The control socket's status carries
// them as control.Queue's JSON tags.
const (
	// KeySecs: how long a queue was full, in seconds.
	KeySecs = "failopen_secs"
	// KeyPassed: packets the kernel passed without a verdict.
	KeyPassed = "failopen_passed"
	// KeyExact: whether KeyPassed is counted exactly (from the queue
	// rules' counters) rather than estimated.
	KeyExact = "failopen_exact"
)
