package report

import (
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// TestTopFlowsShadow: in "Top flows by drops", a flow of the shadow rule
// (web-trial) shows its packets over the limit as shadow-dropped, in the
// shadow colour, and dropped 0 (not in the drop colour), as the rule's
// own card does; no dropped cell is red when it says 0.
func TestTopFlowsShadow(t *testing.T) {
	r, f := replayed(t, "policy-mix.toml", "policy-mix.pcapng")
	_, doc := render(t, r, Input{Policy: f, Files: []File{{"policy-mix.pcapng", 55660}}, Top: 20})
	var sec *html.Node
	walk(doc, func(n *html.Node) {
		if id, _ := attr(n, "id"); id == "flows" {
			sec = n
		}
	})
	if sec == nil {
		t.Fatal("no flows section")
	}
	var header []string
	shadowRows := 0
	walk(sec, func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "tr" {
			return
		}
		var cells []*html.Node
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode {
				cells = append(cells, c)
			}
		}
		if header == nil {
			for _, c := range cells {
				header = append(header, text(c))
			}
			return
		}
		col := map[string]*html.Node{}
		for i, c := range cells {
			col[header[i]] = c
		}
		if col["dropped"] == nil || col["shadow-dropped"] == nil {
			t.Fatalf("flows table header %q: want dropped and shadow-dropped columns", header)
		}
		class := func(c *html.Node) string { v, _ := attr(c, "class"); return v }
		if text(col["dropped"]) == "0" && strings.Contains(class(col["dropped"]), "drop") {
			t.Errorf("row %q: dropped 0 in the drop colour", text(n))
		}
		if text(col["rule"]) != "web-trial" {
			return
		}
		shadowRows++
		if text(col["dropped"]) != "0" || text(col["drop %"]) != "0.0%" || text(col["shadow-dropped"]) == "0" ||
			!strings.Contains(class(col["shadow-dropped"]), "shadowed") || text(col["packets"]) != text(col["accepted"]) {
			t.Errorf("shadow rule's flow %q: want dropped 0, drop %% 0.0%%, shadow-dropped > 0 in the shadow colour, all accepted", text(n))
		}
	})
	if shadowRows == 0 {
		t.Errorf("no flow of the shadow rule in the top flows:\n%s", text(sec))
	}
}
