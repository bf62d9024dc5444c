package shaper

import "github.com/packetshaper/packetshaper/internal/hist"

// DelayStats summarise the delays (ns) of held packets: how long after its
// arrival each was to depart. Quantiles are upper bounds of histogram
// buckets: exact below 128 ns, within 1/64 above.
type DelayStats = hist.Stats

// delayLayout is the delays' histogram: one bucket per ns below 128, then
// 64 per power of two up to 2^36 ns (69 s; delays are at most
// MaxMaxDelay). Only the deciding goroutine writes it. (internal/hist is
// a leaf package importing nothing of ours: the one exception to shaper
// importing only flows.)
var delayLayout = hist.NewLayout(7, 6, 36)

func newDelayHist() *hist.Hist { return hist.New(delayLayout) }
