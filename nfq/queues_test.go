package nfq

import (
	"slices"
	"testing"
)

// TestParseQueues: a queue or a range of at most MaxQueues, and
// FormatQueues its inverse.
func TestParseQueues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint16
		err  bool
	}{
		{"0", []uint16{0}, false},
		{"65535", []uint16{65535}, false},
		{"2-4", []uint16{2, 3, 4}, false},
		{"7-7", []uint16{7}, false},
		{"", nil, true},
		{"-1", nil, true},
		{"65536", nil, true},
		{"4-2", nil, true},
		{"1-", nil, true},
		{"0-64", nil, true}, // 65 queues
		{"a", nil, true},
	} {
		got, err := ParseQueues(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("ParseQueues(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestFormatQueues(t *testing.T) {
	for _, s := range []string{"0", "7", "2-4", "0-63"} {
		qs, err := ParseQueues(s)
		if err != nil || FormatQueues(qs) != s {
			t.Errorf("FormatQueues(ParseQueues(%q)) = %q, %v", s, FormatQueues(qs), err)
		}
	}
}
