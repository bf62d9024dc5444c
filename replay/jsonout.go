package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"

	"github.com/packetshaper/packetshaper/internal/countname"
)

// replay's --json objects (packetshaper replay --json, written by
// WriteJSON). Their keys are their members' (below), in order: a
// counter's name is countname's, the one the daemon's stats line and
// metrics use, not a struct tag of its own (a tag cannot take a
// constant). Written as encoding/json would write the same struct with
// those tags (the replay goldens hold the bytes); read back by the tests.

// JSONReport is --json's object. Field order is fixed, and nothing in it
// depends on the wall clock: the same command on the same files prints the
// same bytes.
type JSONReport struct {
	Packets  uint64
	Accepted uint64
	Dropped  uint64
	// Shaping: packets accepted later than they arrived, packets dropped
	// because a shaping rule's queue was full, and how long the delayed
	// ones waited (bucket bounds of a histogram, within 1/64).
	Delayed       uint64
	ShapeOverflow uint64
	DelayP50Ns    int64
	DelayP99Ns    int64
	DelayMaxNs    int64

	Malformed  uint64
	NoPorts    uint64
	Unmatched  uint64
	NonIP      uint64
	Flows      uint64
	FlowsSeen  uint64
	Evictions  uint64
	Expired    uint64
	FirstNs    int64
	LastNs     int64
	DurationNs int64
	Rules      []JSONRule
	// GlobalAsLocal names the global rules, which replay runs as local
	// ones (a capture holds one host's view).
	GlobalAsLocal []string
	// PerFlow is written by WriteJSON after the rest, one flow at a
	// time; here for readers of the report (tests).
	PerFlow []JSONFlow
}

func (r *JSONReport) members() []member {
	return []member{
		{countname.Packets, &r.Packets, false}, {countname.Accepted, &r.Accepted, false}, {countname.Dropped, &r.Dropped, false},
		{countname.Delayed, &r.Delayed, false}, {countname.ShapeOverflow, &r.ShapeOverflow, false},
		{countname.DelayP50Ns, &r.DelayP50Ns, false}, {countname.DelayP99Ns, &r.DelayP99Ns, false}, {countname.DelayMaxNs, &r.DelayMaxNs, false},
		{countname.Malformed, &r.Malformed, false}, {countname.NoPorts, &r.NoPorts, false}, {countname.Unmatched, &r.Unmatched, false},
		{countname.NonIP, &r.NonIP, false}, {countname.Flows, &r.Flows, false}, {countname.FlowsSeen, &r.FlowsSeen, false},
		{countname.Evictions, &r.Evictions, false}, {countname.Expired, &r.Expired, false},
		{"first_ns", &r.FirstNs, false}, {"last_ns", &r.LastNs, false}, {"duration_ns", &r.DurationNs, false},
		{"rules", &r.Rules, false},
		{"global_as_local", &r.GlobalAsLocal, len(r.GlobalAsLocal) == 0},
		{"per_flow", &r.PerFlow, len(r.PerFlow) == 0},
	}
}

func (r JSONReport) MarshalJSON() ([]byte, error) { return marshalMembers(r.members()) }

func (r *JSONReport) UnmarshalJSON(b []byte) error { return unmarshalMembers(b, r.members()) }

// JSONRule is a rule of JSONReport's rules, counted as Replayer.Rules.
type JSONRule struct {
	Name          string
	Packets       uint64
	Accepted      uint64
	Dropped       uint64
	ShadowDropped uint64
	Marked        uint64
	Delayed       uint64
	ShapeOverflow uint64
	Flows         uint64
	Evictions     uint64
}

func (r *JSONRule) members() []member {
	return []member{
		{"name", &r.Name, false}, {countname.Packets, &r.Packets, false}, {countname.Accepted, &r.Accepted, false}, {countname.Dropped, &r.Dropped, false},
		{countname.ShadowDropped, &r.ShadowDropped, false}, {countname.Marked, &r.Marked, false},
		{countname.Delayed, &r.Delayed, false}, {countname.ShapeOverflow, &r.ShapeOverflow, false},
		{countname.Flows, &r.Flows, false}, {countname.Evictions, &r.Evictions, false},
	}
}

func (r JSONRule) MarshalJSON() ([]byte, error) { return marshalMembers(r.members()) }

func (r *JSONRule) UnmarshalJSON(b []byte) error { return unmarshalMembers(b, r.members()) }

// JSONFlow is a flow of per_flow, counted as its rule's counters count:
// the packets over a shadow rule's limit are accepted and shadow_dropped,
// those over a marking rule's accepted and marked; packets = accepted +
// dropped.
type JSONFlow struct {
	Rule          string
	Flow          string
	Packets       uint64
	Accepted      uint64
	Dropped       uint64
	ShadowDropped uint64
	Marked        uint64
}

func (f *JSONFlow) members() []member {
	return []member{
		{"rule", &f.Rule, false}, {"flow", &f.Flow, false},
		{countname.Packets, &f.Packets, false}, {countname.Accepted, &f.Accepted, false}, {countname.Dropped, &f.Dropped, false},
		{countname.ShadowDropped, &f.ShadowDropped, false}, {countname.Marked, &f.Marked, false},
	}
}

func (f JSONFlow) MarshalJSON() ([]byte, error) { return marshalMembers(f.members()) }

func (f *JSONFlow) UnmarshalJSON(b []byte) error { return unmarshalMembers(b, f.members()) }

// member is a member of a JSON object: its key, a pointer to its value,
// and whether it is left out (an empty omitempty member).
type member struct {
	key  string
	ptr  any
	omit bool
}

// marshalMembers writes the members as one compact object, as
// encoding/json writes a struct (the caller's encoder indents it).
func marshalMembers(ms []member) ([]byte, error) {
	return appendMembers(make([]byte, 0, 24*len(ms)), ms, "", "")
}

// appendMembers appends the members as one object, as encoding/json
// writes a struct, without HTML escaping ("udp a:1 > b:2"): compact with
// indent "", else as an Encoder with SetIndent(prefix, indent) writes it
// (without the final newline). A plain string or an integer does not
// allocate: WriteJSON writes a million flows this way.
func appendMembers(b []byte, ms []member, prefix, indent string) ([]byte, error) {
	b = append(b, '{')
	n := 0
	for _, m := range ms {
		if m.omit {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		if indent != "" {
			b = append(append(append(b, '\n'), prefix...), indent...)
		}
		b = strconv.AppendQuote(b, m.key) // plain ASCII names
		b = append(b, ':')
		if indent != "" {
			b = append(b, ' ')
		}
		switch v := m.ptr.(type) {
		case *uint64:
			b = strconv.AppendUint(b, *v, 10)
			continue
		case *int64:
			b = strconv.AppendInt(b, *v, 10)
			continue
		case *string:
			if plain(*v) {
				b = append(append(append(b, '"'), *v...), '"')
				continue
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if indent != "" {
			enc.SetIndent(prefix+indent, indent)
		}
		if err := enc.Encode(m.ptr); err != nil {
			return nil, err
		}
		b = append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
	}
	if n > 0 && indent != "" {
		b = append(append(b, '\n'), prefix...)
	}
	return append(b, '}'), nil
}

// plain reports whether s is a JSON string's content as it is: printable
// ASCII without a quote or a backslash.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// unmarshalMembers reads an object into the members it has (others are
// ignored, as encoding/json ignores unknown keys).
func unmarshalMembers(data []byte, ms []member) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for _, m := range ms {
		if v, ok := raw[m.key]; ok {
			if err := json.Unmarshal(v, m.ptr); err != nil {
				return fmt.Errorf("%s: %w", m.key, err)
			}
		}
	}
	return nil
}

// WriteJSON writes what r replayed as --json's object (JSONReport),
// asLocal naming the global rules replayed as local ones. per_flow is
// streamed last, one flow at a time.
func (r *Replayer) WriteJSON(w io.Writer, asLocal []string) error {
	s := r.Summary()
	rep := JSONReport{
		Packets: s.Packets, Accepted: s.Accepted, Dropped: s.Dropped,
		Delayed: s.Delayed, ShapeOverflow: s.ShapeOverflow,
		DelayP50Ns: s.Delays.P50, DelayP99Ns: s.Delays.P99, DelayMaxNs: s.Delays.Max,
		Malformed: s.Malformed,
		NoPorts:   s.NoPorts, Unmatched: s.Unmatched, NonIP: s.NonIP,
		Flows: s.Flows, FlowsSeen: s.FlowsSeen, Evictions: s.Evictions, Expired: s.Expired,
		FirstNs: s.First, LastNs: s.Last, DurationNs: int64(s.Duration()),
		Rules: []JSONRule{}, GlobalAsLocal: asLocal,
	}
	rules := r.Rules()
	for _, ru := range rules {
		rep.Rules = append(rep.Rules, JSONRule{Name: ru.Name, Packets: ru.Packets, Accepted: ru.Accepted, Dropped: ru.Dropped,
			ShadowDropped: ru.ShadowDropped, Marked: ru.Marked, Delayed: ru.Delayed, ShapeOverflow: ru.ShapeOverflow,
			Flows: ru.Flows, Evictions: ru.Evictions})
	}
	// Everything but per_flow, which is streamed after it: a million
	// flows never make a million strings at once. Naming each flow makes
	// garbage, which the collector would let grow as large as the live
	// heap (the tables) before collecting: collect early meanwhile.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var head bytes.Buffer
	enc := json.NewEncoder(&head)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "udp a:1 > b:2", not "\u003e"
	if err := enc.Encode(rep); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(bytes.TrimSuffix(head.Bytes(), []byte("\n}\n")))
	bw.WriteString(",\n  \"per_flow\": [")
	// Each flow is written in place: jf's members (its keys, pointers to
	// its fields) made once, no encoder's reflection.
	var jf JSONFlow
	members := jf.members()
	var one []byte
	n := 0
	var err error
	r.EachFlow(func(f FlowSummary) {
		if err != nil {
			return
		}
		jf = JSONFlow{Rule: rules[f.Rule].Name, Flow: f.Flow, Packets: f.Packets, Accepted: f.Accepted, Dropped: f.Dropped,
			ShadowDropped: f.ShadowDropped, Marked: f.Marked}
		if one, err = appendMembers(one[:0], members, "    ", "  "); err != nil {
			return
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		bw.Write(one)
		n++
	})
	if err != nil {
		return err
	}
	if n > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}
