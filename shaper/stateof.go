package shaper

// StateOf is the State held in these fields by a copy of Limiter's
// arithmetic outside Go (the kernel fast path's flow_state): last, the
// newest time the limiter saw; tokens, the token bucket's nano-units; win,
// cur and prev, the windows' index and counts, or the token bucket's
// unspent fraction as win:cur. Not for the sliding-window log, which no
// such copy keeps. For reading such a state (Left, Capacity), so that the
// arithmetic is written once.
func StateOf(last, tokens, win, cur, prev int64) State {
	return State{last: last, tokens: tokens, win: win, cur: cur, prev: prev}
}
