package nfq

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxQueues is the most queues one shaper serves (ParseQueues).
const MaxQueues = 64

// ParseQueues parses "N" or "N-M" (N <= M, at most MaxQueues) into the
// queue numbers, in order.
func ParseQueues(s string) ([]uint16, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%q is not a queue number 0-65535 or a range N-M", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
			return nil, fmt.Errorf("%q is not a queue number 0-65535 or a range N-M with N <= M", s)
		}
	}
	if b-a >= MaxQueues {
		return nil, fmt.Errorf("%q is %d queues; at most %d", s, b-a+1, MaxQueues)
	}
	qs := make([]uint16, 0, b-a+1)
	for q := a; q <= b; q++ {
		qs = append(qs, uint16(q))
	}
	return qs, nil
}

// FormatQueues formats consecutive queue numbers as ParseQueues takes
// them: "0" or "0-3".
func FormatQueues(qs []uint16) string {
	if len(qs) == 1 {
		return fmt.Sprint(qs[0])
	}
	return fmt.Sprintf("%d-%d", qs[0], qs[len(qs)-1])
}
