package control

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A listing is mostly Flow lines: a million flows are a million lines,
// written by the daemon while it holds the engine between batches. The
// standard encoder (reflection) costs about 3 times as much as this
// hand-written one, which does not allocate (BenchmarkFlowJSON runs both:
// go test -run '^$' -bench FlowJSON -benchmem ./internal/control); the tests
// hold it to encoding/json's output. Reading is encoding/json's (the
// client, on an operator's command).

// AppendJSON appends f as a JSON object, as encoding/json would write it
// (without HTML escaping); a non-finite number (which encoding/json
// refuses) is written as null, never as NaN or Inf. Its keys are Flow's
// JSON tags (flowKey), declared once.
func (f *Flow) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	b = append(b, kQueue[1:]...)
	b = strconv.AppendUint(b, uint64(f.Queue), 10)
	b = append(b, kRule...)
	b = appendString(b, f.Rule)
	b = append(b, kKey...)
	b = appendString(b, f.Key)
	b = append(b, kPackets...)
	b = strconv.AppendUint(b, f.Packets, 10)
	b = append(b, kAccepted...)
	b = strconv.AppendUint(b, f.Accepted, 10)
	b = append(b, kDropped...)
	b = strconv.AppendUint(b, f.Dropped, 10)
	if f.ShadowDropped != 0 {
		b = append(b, kShadowDropped...)
		b = strconv.AppendUint(b, f.ShadowDropped, 10)
	}
	if f.Marked != 0 {
		b = append(b, kMarked...)
		b = strconv.AppendUint(b, f.Marked, 10)
	}
	b = append(b, kLeft...)
	b = appendFloat(b, f.Left)
	b = append(b, kUnit...)
	b = appendString(b, f.Unit)
	b = append(b, kIdleSecs...)
	b = appendFloat(b, f.IdleSecs)
	if f.Expired {
		b = append(b, kExpired...)
		b = append(b, "true"...)
	}
	b = append(b, kPath...)
	b = appendString(b, f.Path)
	return append(b, '}')
}

// The keys AppendJSON writes, from Flow's tags.
var (
	kQueue, kRule, kKey               = flowKey("Queue"), flowKey("Rule"), flowKey("Key")
	kPackets, kAccepted, kDropped     = flowKey("Packets"), flowKey("Accepted"), flowKey("Dropped")
	kShadowDropped, kMarked           = flowKey("ShadowDropped"), flowKey("Marked")
	kLeft, kUnit, kIdleSecs, kExpired = flowKey("Left"), flowKey("Unit"), flowKey("IdleSecs"), flowKey("Expired")
	kPath                             = flowKey("Path")
)

// flowKey is the JSON key of Flow's field as encoding/json writes it after
// another: `,"name":`, the name from the field's json tag. Flow's fields
// are fixed: a name that is not one is a bug, found at start.
func flowKey(field string) string {
	f, ok := reflect.TypeFor[Flow]().FieldByName(field)
	if !ok {
		panic("control: Flow has no field " + field)
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		name = field
	}
	return `,"` + name + `":`
}

// appendFloat writes a float as encoding/json does; null if not finite.
func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	abs := v
	if abs < 0 {
		abs = -abs
	}
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		b = strconv.AppendFloat(b, v, 'e', -1, 64)
		// encoding/json writes e-07, not e-7's zero-padded form... it
		// drops the padding: 1e-07 → 1e-7.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
		return b
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendString writes a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 as U+FFFD, as encoding/json does
// (without HTML escaping; U+2028 and U+2029 escaped).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
