package control

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// A listing is mostly Flow lines: a million flows are a million lines. The
// standard encoder and decoder (reflection) cost about 0.6 µs to write a
// flow and 2.5 µs to read one on the 2-core test VM, time taken from the
// packets on a small machine; these hand-written ones take about 0.19 and
// 0.47 µs, without allocating to write (BenchmarkFlowJSON runs all four:
// go test -run '^$' -bench FlowJSON -benchmem ./daemon/control). The tests
// hold them to encoding/json's results.

// AppendJSON appends f as a JSON object, as encoding/json would write it
// (without HTML escaping).
func (f *Flow) AppendJSON(b []byte) []byte {
	b = append(b, `{"queue":`...)
	b = strconv.AppendUint(b, uint64(f.Queue), 10)
	b = append(b, `,"rule":`...)
	b = appendString(b, f.Rule)
	b = append(b, `,"key":`...)
	b = appendString(b, f.Key)
	b = append(b, `,"packets":`...)
	b = strconv.AppendUint(b, f.Packets, 10)
	b = append(b, `,"accepted":`...)
	b = strconv.AppendUint(b, f.Accepted, 10)
	b = append(b, `,"dropped":`...)
	b = strconv.AppendUint(b, f.Dropped, 10)
	if f.ShadowDropped != 0 {
		b = append(b, `,"shadow_dropped":`...)
		b = strconv.AppendUint(b, f.ShadowDropped, 10)
	}
	if f.Marked != 0 {
		b = append(b, `,"marked":`...)
		b = strconv.AppendUint(b, f.Marked, 10)
	}
	b = append(b, `,"left":`...)
	b = appendFloat(b, f.Left)
	b = append(b, `,"unit":`...)
	b = appendString(b, f.Unit)
	b = append(b, `,"idle_secs":`...)
	b = appendFloat(b, f.IdleSecs)
	if f.Expired {
		b = append(b, `,"expired":true`...)
	}
	return append(b, '}')
}

// appendFloat writes a float as encoding/json does.
func appendFloat(b []byte, v float64) []byte {
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

// flowFields is Flow without its methods, for encoding/json.
type flowFields Flow

var errSlowPath = errors.New("not a flat flow object")

// UnmarshalJSON decodes a Flow: a flat object of the fields AppendJSON
// writes, in any order. Anything else (escapes, unknown fields, ...) it
// leaves to encoding/json, whose result it always has.
func (f *Flow) UnmarshalJSON(b []byte) error {
	var g Flow
	if err := g.parseFlat(b); err == nil {
		*f = g
		return nil
	}
	return json.Unmarshal(b, (*flowFields)(f))
}

// parseFlat parses {"k":v,...} with Flow's keys, string values without
// escapes, numbers and booleans; anything else is errSlowPath.
func (f *Flow) parseFlat(b []byte) error {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	str := func() ([]byte, bool) {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		i++
		s := i
		for i < len(b) && b[i] != '"' {
			if b[i] == '\\' || b[i] < 0x20 {
				return nil, false
			}
			i++
		}
		if i >= len(b) {
			return nil, false
		}
		i++
		return b[s : i-1], true
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return errSlowPath
	}
	i++
	ws()
	if i < len(b) && b[i] == '}' {
		i++
		ws()
		if i != len(b) {
			return errSlowPath
		}
		return nil
	}
	for {
		ws()
		k, ok := str()
		if !ok {
			return errSlowPath
		}
		ws()
		if i >= len(b) || b[i] != ':' {
			return errSlowPath
		}
		i++
		ws()
		if i >= len(b) {
			return errSlowPath
		}
		switch c := b[i]; {
		case c == '"':
			v, ok := str()
			if !ok || !utf8.Valid(v) {
				return errSlowPath
			}
			switch string(k) {
			case "rule":
				f.Rule = string(v)
			case "key":
				f.Key = string(v)
			case "unit":
				f.Unit = string(v)
			default: // a type encoding/json would refuse, or an unknown field
				return errSlowPath
			}
		case c == 't' || c == 'f':
			v := c == 't'
			word := "false"
			if v {
				word = "true"
			}
			if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
				return errSlowPath
			}
			i += len(word)
			if string(k) != "expired" {
				return errSlowPath
			}
			f.Expired = v
		case c == '-' || c >= '0' && c <= '9':
			s := i
			for i < len(b) && (b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= '0' && b[i] <= '9') {
				i++
			}
			num := string(b[s:i])
			var err error
			switch string(k) {
			case "queue":
				var u uint64
				u, err = strconv.ParseUint(num, 10, 16)
				f.Queue = uint16(u)
			case "packets":
				f.Packets, err = strconv.ParseUint(num, 10, 64)
			case "accepted":
				f.Accepted, err = strconv.ParseUint(num, 10, 64)
			case "dropped":
				f.Dropped, err = strconv.ParseUint(num, 10, 64)
			case "shadow_dropped":
				f.ShadowDropped, err = strconv.ParseUint(num, 10, 64)
			case "marked":
				f.Marked, err = strconv.ParseUint(num, 10, 64)
			case "left":
				f.Left, err = strconv.ParseFloat(num, 64)
			case "idle_secs":
				f.IdleSecs, err = strconv.ParseFloat(num, 64)
			default:
				return errSlowPath
			}
			if err != nil {
				return errSlowPath
			}
		default:
			return errSlowPath // null, objects, arrays
		}
		ws()
		if i >= len(b) {
			return errSlowPath
		}
		if b[i] == '}' {
			i++
			ws()
			if i != len(b) {
				return errSlowPath
			}
			return nil
		}
		if b[i] != ',' {
			return errSlowPath
		}
		i++
	}
}
