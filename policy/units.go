package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/packetshaper/packetshaper/shaper"
)

// Rates in one unit: check prints every bitrate in bits per second with an
// SI prefix (canonicalBitrate), its value in bits per second beside it
// (bitrateComment), and a rule written in one of tc's byte units ("mbps":
// megabytes per second) is accepted with a warning naming the bit-rate it
// means (byteUnitWarning).

// bitUnits are the units canonicalBitrate writes, largest first, with
// their bits per second.
var bitUnits = []struct {
	name string
	bits float64
}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}

// canonicalBitrate writes the rate of s (any unit ParseBitrate reads) in
// the largest SI bit unit that keeps its number at least 1 and reads back
// to the same rate exactly ("10mbps" is "80mbit", "0.5mbit" "500kbit"); s
// itself when it does not parse.
func canonicalBitrate(s string) string {
	r, err := shaper.ParseBitrate(s)
	if err != nil {
		return s
	}
	bits := r * 8
	for _, u := range bitUnits {
		if bits < u.bits && u.bits > 1 {
			continue
		}
		c := formatNumber(bits/u.bits) + u.name
		if v, err := shaper.ParseBitrate(c); err == nil && v == r {
			return c
		}
	}
	// bits × 1/8 is exact: the plain bit form always reads back.
	return formatNumber(bits) + "bit"
}

// bitrateComment is check's comment beside a bitrate: its value in bits
// per second.
func bitrateComment(d *Rule) string {
	r, err := shaper.ParseBitrate(d.Bitrate)
	if err != nil {
		return ""
	}
	return formatNumber(r*8) + " bits/s"
}

// byteUnitWarning is the warning for rule name's bitrate s when it is
// written in bytes per second (tc's bps, kbps, mbps ...), or "".
func byteUnitWarning(name, s string) string {
	unit, bitUnit, ok := shaper.ByteRateUnit(s)
	if !ok {
		return ""
	}
	r, err := shaper.ParseBitrate(s)
	if err != nil {
		return ""
	}
	c := canonicalBitrate(s)
	num := strings.TrimSpace(strings.TrimSpace(s)[:len(strings.TrimSpace(s))-len(unit)])
	prefix := map[string]string{"bps": "", "kbps": "kilo", "mbps": "mega", "gbps": "giga", "tbps": "tera"}[unit]
	return fmt.Sprintf("rule %q: bitrate %q is %s %sbytes per second, as in tc (%s is bytes, %s is bits): %s, %s bits/s; write %q for that rate, or %q for %s %sbits per second",
		name, s, num, prefix, unit, bitUnit, c, formatNumber(r*8), c, num+bitUnit, num, prefix)
}

// formatNumber writes v as TOML reads it back exactly, an integral value
// as an integer (1000000, not 1e+06).
func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
