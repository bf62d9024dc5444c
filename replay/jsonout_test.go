package replay

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestReplayJSONAsTagged: replay's --json objects, whose counters' keys
// are countname's, are written as encoding/json writes the same structs
// with json tags (the format before the keys were declared once, and
// every field set: omitempty, HTML characters unescaped, indentation), and
// read back to the same values.
func TestReplayJSONAsTagged(t *testing.T) {
	type taggedRule struct {
		Name          string `json:"name"`
		Packets       uint64 `json:"packets"`
		Accepted      uint64 `json:"accepted"`
		Dropped       uint64 `json:"dropped"`
		ShadowDropped uint64 `json:"shadow_dropped"`
		Marked        uint64 `json:"marked"`
		Delayed       uint64 `json:"delayed"`
		ShapeOverflow uint64 `json:"shape_overflow"`
		Flows         uint64 `json:"flows"`
		Evictions     uint64 `json:"evictions"`
	}
	type taggedFlow struct {
		Rule          string `json:"rule"`
		Flow          string `json:"flow"`
		Packets       uint64 `json:"packets"`
		Accepted      uint64 `json:"accepted"`
		Dropped       uint64 `json:"dropped"`
		ShadowDropped uint64 `json:"shadow_dropped"`
		Marked        uint64 `json:"marked"`
	}
	type taggedReport struct {
		Packets       uint64       `json:"packets"`
		Accepted      uint64       `json:"accepted"`
		Dropped       uint64       `json:"dropped"`
		Delayed       uint64       `json:"delayed"`
		ShapeOverflow uint64       `json:"shape_overflow"`
		DelayP50Ns    int64        `json:"delay_p50_ns"`
		DelayP99Ns    int64        `json:"delay_p99_ns"`
		DelayMaxNs    int64        `json:"delay_max_ns"`
		Malformed     uint64       `json:"malformed"`
		NoPorts       uint64       `json:"no_ports"`
		Unmatched     uint64       `json:"unmatched"`
		NonIP         uint64       `json:"non_ip"`
		Flows         uint64       `json:"flows"`
		FlowsSeen     uint64       `json:"flows_seen"`
		Evictions     uint64       `json:"evictions"`
		Expired       uint64       `json:"expired"`
		FirstNs       int64        `json:"first_ns"`
		LastNs        int64        `json:"last_ns"`
		DurationNs    int64        `json:"duration_ns"`
		Rules         []taggedRule `json:"rules"`
		GlobalAsLocal []string     `json:"global_as_local,omitempty"`
		PerFlow       []taggedFlow `json:"per_flow,omitempty"`
	}
	encode := func(v any) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	full := JSONReport{1, 2, 3, 4, 5, -6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 1 << 62,
		[]JSONRule{{"a<&>\"\\\n\u2028é", 1, 2, 3, 4, 5, 6, 7, 8, 9}, {Name: "b"}},
		[]string{"g1", "g<2>"},
		[]JSONFlow{{"a", "udp 10.0.0.1:5000 > 10.0.0.2:9000", 1, 2, 3, 4, 5}, {Rule: "b", Flow: "\xff"}}}
	// tag is rep as the tagged struct (a conversion: the fields are the
	// same but for their tags).
	tag := func(rep JSONReport) taggedReport {
		var out taggedReport
		out.Packets, out.Accepted, out.Dropped, out.Delayed, out.ShapeOverflow = rep.Packets, rep.Accepted, rep.Dropped, rep.Delayed, rep.ShapeOverflow
		out.DelayP50Ns, out.DelayP99Ns, out.DelayMaxNs = rep.DelayP50Ns, rep.DelayP99Ns, rep.DelayMaxNs
		out.Malformed, out.NoPorts, out.Unmatched, out.NonIP = rep.Malformed, rep.NoPorts, rep.Unmatched, rep.NonIP
		out.Flows, out.FlowsSeen, out.Evictions, out.Expired = rep.Flows, rep.FlowsSeen, rep.Evictions, rep.Expired
		out.FirstNs, out.LastNs, out.DurationNs = rep.FirstNs, rep.LastNs, rep.DurationNs
		if rep.Rules != nil {
			out.Rules = []taggedRule{}
		}
		for _, r := range rep.Rules {
			out.Rules = append(out.Rules, taggedRule(r))
		}
		out.GlobalAsLocal = rep.GlobalAsLocal
		for _, f := range rep.PerFlow {
			out.PerFlow = append(out.PerFlow, taggedFlow(f))
		}
		return out
	}
	for _, rep := range []JSONReport{full, {Rules: []JSONRule{}}, {}} {
		if reflect.TypeFor[JSONReport]().NumField() != reflect.TypeFor[taggedReport]().NumField() {
			t.Fatal("JSONReport's fields are not taggedReport's")
		}
		got, want := encode(rep), encode(tag(rep))
		if got != want {
			t.Errorf("--json writes\n%s\nencoding/json with tags\n%s", got, want)
		}
		// Read back: the same values as the tagged struct reads.
		var back JSONReport
		var tback taggedReport
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want), &tback); err != nil {
			t.Fatal(err)
		}
		if b := tag(back); !reflect.DeepEqual(b, tback) {
			t.Errorf("read back %+v, want %+v", b, tback)
		}
		// Written in place, indented (as writeJSON writes per_flow's
		// flows): as an indenting encoder writes it.
		for _, in := range [][2]string{{"", "  "}, {"    ", "  "}, {"", ""}} {
			var w bytes.Buffer
			enc := json.NewEncoder(&w)
			enc.SetIndent(in[0], in[1])
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tag(rep)); err != nil {
				t.Fatal(err)
			}
			got, err := appendMembers(nil, rep.members(), in[0], in[1])
			if err != nil {
				t.Fatal(err)
			}
			if want := bytes.TrimSuffix(w.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
				t.Errorf("indent %q: in place\n%s\nencoder\n%s", in, got, want)
			}
		}
	}
}
