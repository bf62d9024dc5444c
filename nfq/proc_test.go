package nfq

import "testing"

func TestEachProcLine(t *testing.T) {
	const table = "    0  12345     3 2   256     0     0      17  1\n" +
		"    7 4294967295 0 2 65535  9 10 4294967295  1\n" +
		"garbage\n" +
		"65536 1 2 3 4 5 6 7 1\n" + // no such queue
		"    9 1 2 3 4 5 6 99999999999999999999 1\n" + // overflows
		"    8 1 2 3 4 5 6" // cut
	type line struct {
		q  uint16
		ks KernelStats
	}
	var got []line
	eachProcLine([]byte(table), func(q uint16, ks KernelStats) { got = append(got, line{q, ks}) })
	want := []line{
		{0, KernelStats{PortID: 12345, QueueTotal: 3, CopyRange: 256, IDSequence: 17}},
		{7, KernelStats{PortID: 4294967295, CopyRange: 65535, QueueDropped: 9, UserDropped: 10, IDSequence: 4294967295}},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { eachProcLine([]byte(table), func(uint16, KernelStats) {}) }); n != 0 {
		t.Errorf("eachProcLine allocates %v times", n)
	}
}
