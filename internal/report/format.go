package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// num writes n with thousands separated by commas.
func num(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// pct is part of whole as a percentage, "–" when whole is 0.
func pct(part, whole uint64) string {
	if whole == 0 {
		return "–"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// pctOf is " (pct)", or "" when whole is 0.
func pctOf(part, whole uint64) string {
	if whole == 0 {
		return ""
	}
	return " (" + pct(part, whole) + ")"
}

// rate formats packets per second: 3 significant digits at most, k and M
// for thousands and millions.
func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmtFloat(round3(v/1e6)) + "M"
	case v >= 1e3:
		return fmtFloat(round3(v/1e3)) + "k"
	}
	return fmtFloat(round3(v))
}

// round3 rounds v to 3 significant digits.
func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// fmtFloat writes v without trailing zeros or float noise.
func fmtFloat(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// fmtDuration is time.Duration's String without zero minutes and
// seconds: "2h", "1m30s", "500ms".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtTime formats a capture timestamp (ns since the Unix epoch) in UTC.
func fmtTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.999999999 UTC")
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
