package failopen

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// QueueRules lists every nf_tables rule of the calling thread's network
// namespace that sends packets to NFQUEUE, with its packet counter. It
// dumps every chain of every table: meant for startup, not for a loop.
// The error is one line.
func QueueRules() ([]QueueRule, error) {
	runtime.LockOSThread() // the netlink socket is created in this thread's namespace
	defer runtime.UnlockOSThread()
	rr, err := newRuleReader(-1)
	if err != nil {
		return nil, err
	}
	defer rr.close()
	return rr.read(true)
}

// ruleReader reads queue rules through one netlink socket, opened in the
// namespace of the thread that created it. A full read dumps every chain
// and remembers those that hold queue rules; a quick read dumps only those
// (a rule added elsewhere shows at the next full read). Not safe for
// concurrent use.
type ruleReader struct {
	conn   *nftables.Conn
	nsfd   int               // the namespace, to reconnect; -1: none
	chains []*nftables.Chain // chains with queue rules at the last full read
}

// newRuleReader connects in the calling thread's namespace (which must be
// locked to it). nsfd, if not -1, is that namespace, for reconnecting
// from another thread after an error; the reader does not close it.
func newRuleReader(nsfd int) (*ruleReader, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nfq: nf_tables netlink socket: %w", err)
	}
	return &ruleReader{conn: c, nsfd: nsfd}, nil
}

func (rr *ruleReader) close() {
	if rr.conn != nil {
		rr.conn.CloseLasting()
		rr.conn = nil
	}
}

// reconnect replaces the socket after an error (a dump cut short can leave
// messages behind on it).
func (rr *ruleReader) reconnect() {
	rr.close()
	if rr.nsfd < 0 {
		return
	}
	if c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(rr.nsfd)); err == nil {
		rr.conn = c
	}
}

// read returns the queue rules: of every chain if full, else of the chains
// found by the last full read.
func (rr *ruleReader) read(full bool) ([]QueueRule, error) {
	if rr.conn == nil {
		rr.reconnect()
		if rr.conn == nil {
			return nil, errors.New("nfq: no nf_tables netlink socket")
		}
	}
	chains := rr.chains
	if full {
		all, err := rr.conn.ListChains()
		if err != nil {
			rr.reconnect()
			return nil, fmt.Errorf("nfq: list nf_tables chains: %w", err)
		}
		chains = all
	}
	var out []QueueRule
	var with []*nftables.Chain
	var firstErr error
	read := 0
	for _, c := range chains {
		rules, err := rr.conn.GetRules(c.Table, c)
		if err != nil {
			// Most likely deleted since it was listed: its rules are
			// gone too. The socket may hold the rest of the failed dump.
			if firstErr == nil {
				firstErr = fmt.Errorf("nfq: list rules of %s %s %s: %w", familyName(byte(c.Table.Family)), c.Table.Name, c.Name, err)
			}
			rr.reconnect()
			if rr.conn == nil {
				return nil, firstErr
			}
			continue
		}
		read++
		n := len(out)
		for _, r := range rules {
			if qr, ok := queueRule(r.Exprs); ok {
				qr.Family, qr.Table, qr.Chain, qr.Handle = familyName(byte(c.Table.Family)), c.Table.Name, c.Name, r.Handle
				out = append(out, qr)
			}
		}
		if len(out) > n {
			with = append(with, c)
		}
	}
	if firstErr != nil && read == 0 {
		return nil, firstErr
	}
	if full {
		rr.chains = with
	}
	slices.SortFunc(out, func(a, b QueueRule) int {
		switch {
		case a.Queue != b.Queue:
			return int(a.Queue) - int(b.Queue)
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return out, nil
}

// queueRule recognises a rule sending to NFQUEUE from its expressions: a
// queue statement or an xt NFQUEUE target, and a counter right before it
// (as iptables-nft and "... counter queue" write it). A counter with a
// match after it ("counter tcp dport 80 queue") counts packets the match
// then turns away, which would inflate the fail-open count: not used. One
// after the queue never runs: queueing ends the rule.
func queueRule(exprs []expr.Any) (QueueRule, bool) {
	var r QueueRule
	for _, e := range exprs {
		switch e := e.(type) {
		default:
			// Anything between a counter and the queue statement may
			// turn packets away after they were counted.
			r.HasCounter, r.Packets = false, 0
		case *expr.Counter:
			r.HasCounter, r.Packets = true, e.Packets
		case *expr.Target:
			if e.Name != "NFQUEUE" {
				continue
			}
			r.Xt = true
			var info []byte
			if u, ok := e.Info.(*xt.Unknown); ok {
				info = *u
			}
			decodeXtNFQ(e.Rev, info, &r)
			return r, true
		case *expr.Queue:
			// The kernel dumps a number and a total for "queue num";
			// for "queue to <expr>" only a source register, which this
			// library drops: then Total is 0.
			r.Queue, r.Queues = e.Num, e.Total
			r.Computed = e.Total == 0
			r.Bypass = e.Flag&expr.QueueFlagBypass != 0
			r.Fanout = e.Flag&expr.QueueFlagFanout != 0
			return r, true
		}
	}
	return QueueRule{}, false
}
