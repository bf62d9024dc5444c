package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/packetshaper/packetshaper/internal/testutil"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
	"github.com/packetshaper/packetshaper/shaper"
)

const testdata = "../../testdata"

// replayed replays files (in testdata) through the rule file pol (in
// testdata, or an absolute path) with a timeline.
func replayed(t *testing.T, pol string, files ...string) (*replay.Replayer, *policy.File) {
	t.Helper()
	if !filepath.IsAbs(pol) {
		pol = filepath.Join(testdata, pol)
	}
	f := testutil.Must(policy.Load(pol))(t)
	c := testutil.Must(f.Compile(policy.Options{}))(t)
	r := replay.New(testutil.Must(shaper.NewPolicy(c.Policy()))(t), replay.Options{Timeline: true, IfaceID: c.IfaceID})
	for _, name := range files {
		if err := r.ReplayFile(filepath.Join(testdata, name)); err != nil {
			t.Fatal(err)
		}
	}
	return r, f
}

func render(t *testing.T, r *replay.Replayer, in Input) ([]byte, *html.Node) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, r, in); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the page does not parse as HTML: %v", err)
	}
	return buf.Bytes(), doc
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func walk(n *html.Node, fn func(*html.Node)) {
	fn(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func text(n *html.Node) string {
	var b strings.Builder
	walk(n, func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
	})
	return b.String()
}

// charts maps each chart's data-chart to the data-series of its series,
// in order.
func charts(doc *html.Node) (map[string][]string, []string) {
	m := map[string][]string{}
	var order []string
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "svg" {
			return
		}
		id, _ := attr(n, "data-chart")
		order = append(order, id)
		m[id] = []string{}
		walk(n, func(s *html.Node) {
			if v, ok := attr(s, "data-series"); ok && s.Type == html.ElementNode {
				m[id] = append(m[id], v)
			}
		})
	})
	return m, order
}

// TestPageCharts: the policy-mix report has the charts and series it
// should: totals (5), one chart per rule (3 each: accepted, the over-limit
// series the rule's mode makes, offered) and the unmatched/non-IP chart
// (3); every chart has a tooltip per bucket.
func TestPageCharts(t *testing.T) {
	r, f := replayed(t, "policy-mix.toml", "policy-mix.pcapng")
	_, doc := render(t, r, Input{Policy: f, PolicySource: "policy-mix.toml", Files: []File{{"policy-mix.pcapng", 55660}}})
	got, order := charts(doc)
	want := map[string][]string{
		"totals":         {"accepted", "dropped", "offered", "shadow-dropped", "marked"},
		"rule:mgmt":      {"accepted", "dropped", "offered"},
		"rule:lab":       {"accepted", "dropped", "offered"},
		"rule:dns":       {"accepted", "dropped", "offered"},
		"rule:web-trial": {"accepted", "shadow-dropped", "offered"},
		"rule:rest":      {"accepted", "dropped", "offered"},
		"other":          {"unmatched", "malformed", "non-IP"},
	}
	if strings.Join(order, " ") != "totals rule:mgmt rule:lab rule:dns rule:web-trial rule:rest other" {
		t.Errorf("charts in order %v", order)
	}
	for id, w := range want {
		if strings.Join(got[id], " ") != strings.Join(w, " ") {
			t.Errorf("chart %s: series %v, want %v", id, got[id], w)
		}
	}
	// 2 s of capture in 100 ms buckets: 20 hover targets per chart, each
	// with a title.
	tl := r.Timeline()
	if tl.Width() != 100*time.Millisecond || tl.Len() != 20 {
		t.Fatalf("timeline: %d buckets of %v, want 20 of 100ms", tl.Len(), tl.Width())
	}
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "g" {
			return
		}
		if c, _ := attr(n, "class"); c == "hover" {
			rects := 0
			for k := n.FirstChild; k != nil; k = k.NextSibling {
				if k.Type == html.ElementNode && k.Data == "rect" && k.FirstChild != nil && k.FirstChild.Data == "title" {
					rects++
				}
			}
			if rects != 20 {
				t.Errorf("a chart has %d hover targets with a title, want 20", rects)
			}
		}
	})
}

// TestPageNumbers: the tables say what the replay counted.
func TestPageNumbers(t *testing.T) {
	r, f := replayed(t, "policy-mix.toml", "policy-mix.pcapng")
	_, doc := render(t, r, Input{Policy: f, Files: []File{{"policy-mix.pcapng", 55660}}})
	body := text(doc)
	for _, ru := range r.Rules() {
		var card *html.Node
		walk(doc, func(n *html.Node) {
			if id, _ := attr(n, "id"); id == "rule-"+ru.Name {
				card = n
			}
		})
		if card == nil {
			t.Fatalf("no card for rule %s", ru.Name)
		}
		ct := text(card)
		for _, want := range []string{"packets" + num(ru.Packets), "accepted" + num(ru.Accepted), "shadow-dropped" + num(ru.ShadowDropped)} {
			if !strings.Contains(ct, want) {
				t.Errorf("rule %s: card lacks %q:\n%s", ru.Name, want, ct)
			}
		}
	}
	for _, fl := range r.Flows(10) {
		if !strings.Contains(body, fl.Flow) {
			t.Errorf("top flows lack %s", fl.Flow)
		}
	}
	for _, want := range []string{
		"2025-01-01 00:00:00 UTC",  // bucket 0's start
		"key src (src-prefix4 24)", // dns: how its flows are keyed
		`pps = 10`,                 // the policy, as check prints it
		"policy-mix.pcapng (54.4 KiB)",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestPageSelfContained: nothing in the page is fetched from anywhere:
// no scripts, style sheets, images, frames or fonts, no URL but the
// page's own anchors.
func TestPageSelfContained(t *testing.T) {
	r, f := replayed(t, "policy-mix.toml", "policy-mix.pcapng")
	page, doc := render(t, r, Input{Policy: f})
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed", "video", "audio", "source", "image", "use", "base", "form":
			t.Errorf("page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			switch a.Key {
			case "src", "href", "xlink:href", "action", "srcset", "poster", "data", "formaction", "background":
				if !strings.HasPrefix(a.Val, "#") {
					t.Errorf("<%s %s=%q>: only in-page links are allowed", n.Data, a.Key, a.Val)
				}
			}
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("<%s %s>: an event handler", n.Data, a.Key)
			}
		}
	})
	for _, bad := range []string{"http:", "https:", "//", "url(", "@import", "@font-face"} {
		if i := bytes.Index(page, []byte(bad)); i >= 0 {
			t.Errorf("page contains %q: …%s…", bad, page[max(0, i-60):min(len(page), i+60)])
		}
	}
}

// TestPageEscapes: names from outside (capture files, the command line,
// an error) are text, never markup.
func TestPageEscapes(t *testing.T) {
	r, f := replayed(t, "policy-mix.toml", "policy-mix.pcapng")
	evil := `<script>alert("x")</script><img src=x>`
	page, doc := render(t, r, Input{Policy: f, Args: []string{"--policy", evil}, PolicySource: evil, Files: []File{{evil, -1}}, Err: evil})
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "script" || n.Data == "img") {
			t.Errorf("an injected <%s> element", n.Data)
		}
	})
	if c := strings.Count(text(doc), evil); c < 4 {
		t.Errorf("the name appears %d times as text, want at least 4", c)
	}
	if bytes.Contains(page, []byte("<script")) {
		t.Error("page contains <script")
	}
}

// TestPageEmpty: a replay of nothing still makes a page, with empty
// charts.
func TestPageEmpty(t *testing.T) {
	eng, err := shaper.New(shaper.Config{Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := replay.New(eng, replay.Options{Timeline: true})
	_, doc := render(t, r, Input{})
	got, _ := charts(doc)
	if len(got) != 3 || len(got["rule:default"]) != 3 {
		t.Errorf("charts %v", got)
	}
	if !strings.Contains(text(doc), "no packets") {
		t.Error("no 'no packets' note")
	}
	if err := Write(&bytes.Buffer{}, replay.New(eng, replay.Options{}), Input{}); err == nil {
		t.Error("Write without a timeline: no error")
	}
}

func TestScales(t *testing.T) {
	for _, c := range []struct{ x, want float64 }{{0, 1}, {0.3, 0.5}, {1, 1}, {1.01, 2}, {3, 5}, {7, 10}, {12.5, 20}, {260.0 / 4, 100}} {
		if got := niceStep(c.x); got != c.want {
			t.Errorf("niceStep(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	for _, c := range []struct {
		d, want time.Duration
	}{{0, time.Millisecond}, {250 * time.Millisecond, 500 * time.Millisecond}, {40 * time.Second, time.Minute}, {100 * time.Hour, 192 * time.Hour}} {
		if got := durationStep(c.d); got != c.want {
			t.Errorf("durationStep(%v) = %v, want %v", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0"}, {0.25, "0.25"}, {12.34, "12.3"}, {1234, "1.23k"}, {2.5e6, "2.5M"}} {
		if got := rate(c.v); got != c.want {
			t.Errorf("rate(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, "0s"}, {90 * time.Second, "1m30s"}, {2 * time.Hour, "2h"}, {time.Minute, "1m"}, {100 * time.Millisecond, "100ms"}} {
		if got := fmtDuration(c.d); got != c.want {
			t.Errorf("fmtDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := num(1234567); got != "1,234,567" {
		t.Errorf("num = %q", got)
	}
}

// TestPageTotals: a policy with a total has a Totals table below the
// rules, the total's packets, accepted and dropped (over it) as replay
// counted them; a policy without one has none (the goldens).
func TestPageTotals(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "totals.toml")
	if err := os.WriteFile(pol, []byte("[[total]]\nname = \"all\"\npps = 2\nburst = 2\n\n[[rule]]\nname = \"r\"\npps = 1000\ntotal = \"all\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, f := replayed(t, pol, "multiflow.pcap")
	ts := r.Totals()
	if len(ts) != 1 || ts[0].Dropped == 0 {
		t.Fatalf("replay's totals %+v: want one, with drops", ts)
	}
	page, _ := render(t, r, Input{Policy: f, Files: []File{{"multiflow.pcap", 1}}, Top: 5})
	want := fmt.Sprintf(`<tr><td>all</td><td class="n">%d</td><td class="n">%d</td><td class="n drop">%d</td>`, ts[0].Packets, ts[0].Accepted, ts[0].Dropped)
	if !bytes.Contains(page, []byte(`<h3 id="totals">Totals</h3>`)) || !bytes.Contains(page, []byte(want)) {
		t.Errorf("the page lacks the totals table with %s", want)
	}
}
