package shaper

import "testing"

// TestAllowNeed: what each Need makes the limiters hold and charge.
func TestAllowNeed(t *testing.T) {
	const sec = int64(1e9)
	now := int64(1_700_000_000) * sec
	tb, err := NewLimiter(LimiterConfig{Algorithm: TokenBucket, Rate: 100, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	tb.Reset(&s, now)
	// A GSO packet of 40 over a burst of 5: NeedAll never passes it,
	// NeedCapped on a full bucket, the excess as debt (35 tokens = 0.35 s).
	if tb.AllowNeed(&s, now, 40, NeedAll) {
		t.Fatal("NeedAll accepted 40 from a bucket of 5")
	}
	if !tb.AllowNeed(&s, now, 40, NeedCapped) {
		t.Fatal("NeedCapped refused 40 on a full bucket of 5")
	}
	if got := tb.Left(&s, now); got != -35 {
		t.Errorf("after the GSO packet: %v tokens, want -35", got)
	}
	if tb.AllowNeed(&s, now+390*sec/1000, 40, NeedCapped) {
		t.Error("NeedCapped accepted before the bucket was full again (0.39 s)")
	}
	if !tb.AllowNeed(&s, now+400*sec/1000, 40, NeedCapped) {
		t.Error("NeedCapped refused on a full bucket (0.40 s)")
	}
	// A cost within the burst: NeedCapped is NeedAll.
	tb.Reset(&s, now)
	if !tb.AllowNeed(&s, now, 3, NeedCapped) || tb.AllowNeed(&s, now, 3, NeedCapped) {
		t.Error("NeedCapped of 3, 3 from 5: want accepted, refused")
	}
	// NeedNone always, charged; NeedOver never, not charged.
	if !tb.AllowNeed(&s, now, 10, NeedNone) || tb.Left(&s, now) != -8 {
		t.Errorf("NeedNone of 10 from 2: %v left, want accepted and -8", tb.Left(&s, now))
	}
	if tb.AllowNeed(&s, now+sec, 1, NeedOver) || tb.Left(&s, now+sec) != 5 {
		t.Errorf("NeedOver: want refused and nothing charged (%v left)", tb.Left(&s, now+sec))
	}
	// The debt is bounded.
	for range 10 {
		tb.AllowNeed(&s, now+sec, 1<<40, NeedNone)
	}
	if s.tokens != -debtMax {
		t.Errorf("tokens %d after a huge debt, want -%d", s.tokens, int64(debtMax))
	}

	fw, err := NewLimiter(LimiterConfig{Algorithm: FixedWindow, Rate: 10, Window: sec})
	if err != nil {
		t.Fatal(err)
	}
	fw.Reset(&s, now)
	if fw.AllowNeed(&s, now, 40, NeedAll) || !fw.AllowNeed(&s, now, 40, NeedCapped) || fw.AllowNeed(&s, now, 1, NeedCapped) {
		t.Error("fixed window: 40 over a limit of 10 wants refused, then accepted on the empty window, then nothing more")
	}
	if !fw.AllowNeed(&s, now+sec, 40, NeedCapped) {
		t.Error("fixed window: the next window refused the GSO packet")
	}
	swc, err := NewLimiter(LimiterConfig{Algorithm: SlidingWindowCounter, Rate: 10, Window: sec})
	if err != nil {
		t.Fatal(err)
	}
	swc.Reset(&s, now)
	if !swc.AllowNeed(&s, now, 40, NeedCapped) || swc.AllowNeed(&s, now+sec+sec/2, 1, NeedAll) {
		t.Error("sliding-window counter: 40 on an empty window wants accepted, and its debt weighs on the next window")
	}
	if !swc.AllowNeed(&s, now+3*sec, 40, NeedCapped) {
		t.Error("sliding-window counter: refused after two windows")
	}
}
