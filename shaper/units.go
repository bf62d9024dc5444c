package shaper

import (
	"strconv"
	"strings"
)

// ParseBitrate parses a rate as tc(8) writes it and returns bytes per
// second. A bare number is bits per second. Suffixes (case-insensitive):
// bit, kbit, mbit, gbit, tbit (SI, powers of 1000, bits per second);
// kibit, mibit, gibit, tibit (powers of 1024, bits); bps, kbps, mbps, gbps,
// tbps (bytes per second, as in tc: "bps" is bytes). "500kbit" is 62500
// bytes per second.
func ParseBitrate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	// Units start with b, k, m, g or t, never with e: an 'e' belongs to
	// the number's exponent (1e6bit).
	i := strings.IndexFunc(t, func(r rune) bool { return r >= 'a' && r <= 'z' && r != 'e' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], t[i:]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, configErr(about(SettingRate), "bad rate %q (want a number with a unit such as 500kbit, 10mbit or 1gbit)", s)
	}
	mult, ok := rateUnits[unit]
	if !ok {
		return 0, configErr(about(SettingRate), "bad rate unit %q in %q (want bit, kbit, mbit, gbit, tbit, kibit, mibit, gibit, tibit, bps, kbps, mbps, gbps, tbps)", unit, s)
	}
	r := v * mult
	switch {
	case r < 0:
		return 0, configErr(about(SettingRate), "rate %q is negative: a rate is above zero (to drop every packet, a rule with action = \"drop\")", s)
	case r == 0:
		return 0, configErr(about(SettingRate), "rate %q is zero: a rate is above zero (to drop every packet, a rule with action = \"drop\")", s)
	case !(r <= 1e15):
		return 0, configErr(about(SettingRate), "rate %q out of range: at most 8pbit (1e15 bytes per second)", s)
	}
	return r, nil
}

// ByteRateUnit reports whether the rate s is written in one of tc's
// byte units (bps, kbps, mbps, gbps, tbps: bytes, not bits, per second),
// which newcomers read as bits; it returns the unit as written
// (lower-cased) and its bit counterpart ("mbps" and "mbit").
func ByteRateUnit(s string) (unit, bitUnit string, ok bool) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return r >= 'a' && r <= 'z' && r != 'e' })
	if i < 0 {
		return "", "", false
	}
	unit = t[i:]
	if !strings.HasSuffix(unit, "bps") {
		return "", "", false
	}
	if _, known := rateUnits[unit]; !known {
		return "", "", false
	}
	return unit, strings.TrimSuffix(unit, "ps") + "it", true
}

// rateUnits gives bytes per second per unit.
var rateUnits = map[string]float64{
	"": 1.0 / 8, "bit": 1.0 / 8,
	"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
	"kibit": 1024.0 / 8, "mibit": (1 << 20) / 8.0, "gibit": (1 << 30) / 8.0, "tibit": (1 << 40) / 8.0,
	"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
}
