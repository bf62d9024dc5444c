// Package countname declares, once, the names of the counters that more
// than one output writes: the daemon's stats line and metrics (the
// counters' table, package daemon), replay's --json and summary, and the
// replay report's totals. Each name is a string literal here only; the
// outputs take it from these constants. The control socket's JSON keys
// (package control) are struct tags, which cannot take a constant: the
// control tests hold those tags to these names.
//
// It imports nothing: any package may use it.
package countname

// The counters' names.
const (
	// NoPorts: packets whose ports could not be read (a fragment, a short
	// header), limited by address and protocol.
	NoPorts = "no_ports"
	// ShadowDropped: packets over a shadow rule's limit, accepted.
	ShadowDropped = "shadow_dropped"
	// ShapeOverflow: packets a shaping rule dropped because its queue
	// (max-delay) or the held packets (--max-held) were full.
	ShapeOverflow = "shape_overflow"
)
