package failopen

import (
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/netnstest"
	"github.com/packetshaper/packetshaper/nfq"
)

func openQueue(t testing.TB, c nfq.Config) *nfq.Queue {
	t.Helper()
	return netnstest.Open(t, nfq.Open, c)
}

func runQueue(t testing.TB, q *nfq.Queue, fn nfq.Handler) (stop func() (time.Duration, error)) {
	t.Helper()
	return netnstest.RunQueue(t, q, fn)
}

func seqOf(p *nfq.Packet) (uint16, bool) { return netnstest.SeqOf(p.Data) }
