package e2e

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

const topPolicy = `
[[rule]]
name  = "web"
match = { proto = ["udp"], sport = ["20000-20003"] }
pps   = 20
burst = 5

[[rule]]
name  = "bulk"
match = { proto = ["udp"], sport = ["22000"] }
pps   = 10000
burst = 1000
`

// tmuxSession is a detached tmux session on a private server (its own
// socket), killed with its server at cleanup.
type tmuxSession struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T, width, height int, command string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux not found in PATH (apt-get install tmux): the top test needs a real terminal")
	}
	s := &tmuxSession{t: t, socket: fmt.Sprintf("pstest-%d", os.Getpid())}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		defer cancel()
		exec.CommandContext(ctx, "tmux", "-L", s.socket, "kill-server").Run()
		// The server leaves its socket file when it ends by itself.
		dir := os.Getenv("TMUX_TMPDIR")
		if dir == "" {
			dir = "/tmp"
		}
		os.Remove(filepath.Join(dir, fmt.Sprintf("tmux-%d", os.Getuid()), s.socket))
	})
	s.tmux("new-session", "-d", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), command)
	return s
}

func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// capture is the pane's text (with -e, its ANSI colours and attributes).
func (s *tmuxSession) capture(ansi bool) string {
	s.t.Helper()
	if ansi {
		return s.tmux("capture-pane", "-p", "-e")
	}
	return s.tmux("capture-pane", "-p")
}

// topFrame is a parsed frame of packetshaper top.
type topFrame struct {
	text  string
	sort  string
	rules map[string][]float64 // PKT/S ACC/S DROP/S SHADOW/S MARK/S FLOWS
	flows []topFlow            // in the order shown
}

type topFlow struct {
	key              string
	pps, drops       float64
	packets, dropped float64
}

var (
	topSortRe = regexp.MustCompile(`flows by (\w+)/s`)
	topFlowRe = regexp.MustCompile(`^\s*\d+ (\S+)\s+(udp \S+ > \S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$`)
)

// num parses a number of the frame: "12.5", "1.2k", "3.4M"; "-" is -1.
func num(s string) float64 {
	mul := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mul, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mul, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return v * mul
}

func parseTop(text string) topFrame {
	f := topFrame{text: text, rules: map[string][]float64{}}
	if m := topSortRe.FindStringSubmatch(text); m != nil {
		f.sort = m[1]
	}
	part := 0
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "RULE"):
			part = 1
			continue
		case strings.HasPrefix(strings.TrimSpace(l), "Q RULE"):
			part = 2
			continue
		case strings.TrimSpace(l) == "":
			part = 0
			continue
		}
		switch part {
		case 1:
			fs := strings.Fields(l)
			if len(fs) >= 8 {
				var v []float64
				for _, x := range fs[len(fs)-6:] {
					v = append(v, num(x))
				}
				f.rules[fs[0]] = v
			}
		case 2:
			if m := topFlowRe.FindStringSubmatch(l); m != nil {
				f.flows = append(f.flows, topFlow{key: m[2], pps: num(m[3]), drops: num(m[5]), packets: num(m[6]), dropped: num(m[7])})
			}
		}
	}
	return f
}

func (f topFrame) flow(key string) (topFlow, bool) {
	for _, x := range f.flows {
		if x.key == key {
			return x, true
		}
	}
	return topFlow{}, false
}

// TestTopInTmux runs packetshaper top in a real terminal (tmux, 120×40)
// against a shaper deciding real traffic: four flows over their rule's
// limit (100 packets/s against 20) and one accepted flow sending more
// (300/s). It checks the header, the rules' rates, the flows' rows, that
// frames refresh, that s changes the order (most drops first: a limited
// flow; most packets first: the accepted one) and that q quits with exit
// status 0. PS_TOP_SCREENSHOT=FILE.html saves the last frame as HTML
// (docs/top.png is chromium's screenshot of it).
func TestTopInTmux(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newShapedTopo(t, topPolicy)
	dir := tp.Dir
	sock := tp.Sock
	tp.startShaped()
	tp.startRecv(":9000", "--duration", "60s")
	tp.startSend("--dst", tp.IPB+":9000", "--flows", "4", "--sport", "20000", "--pps", "100", "--duration", "40s")
	tp.startSend("--dst", tp.IPB+":9000", "--flows", "1", "--sport", "22000", "--pps", "300", "--duration", "40s")

	status := filepath.Join(dir, "status")
	cmd := fmt.Sprintf("ip netns exec %s %s top --control-socket %s; echo $? > %s", tp.B, shaperBin, sock, status)
	tm := newTmux(t, 120, 40, cmd)

	webKey := func(i int) string { return fmt.Sprintf("udp %s:%d > %s:9000", tp.IPA, 20000+i, tp.IPB) }
	bulkKey := fmt.Sprintf("udp %s:22000 > %s:9000", tp.IPA, tp.IPB)
	// A frame with rates: every flow shown, the rule web passing packets.
	var first topFrame
	ready := func(f topFrame) bool {
		if r := f.rules["web"]; len(r) != 6 || r[0] <= 0 || r[2] <= 0 {
			return false
		}
		for i := range 4 {
			if x, ok := f.flow(webKey(i)); !ok || x.drops <= 0 {
				return false
			}
		}
		_, ok := f.flow(bulkKey)
		return ok
	}
	if !testutil.WaitFor(t, 30*time.Second, func() bool { first = parseTop(tm.capture(false)); return ready(first) }) {
		t.Fatalf("no frame with the rules' rates and the 5 flows within 30 s; the last:\n%s", first.text)
	}
	for _, want := range []string{"packetshaper ", "queues 0 (1 bound)", "in ", "pkt/s", "accepted ", "dropped ", "fail-open ", "RULE", "LIMIT", "20 pkt/s tb b5", "DROP/S", "5 flows"} {
		if !strings.Contains(first.text, want) {
			t.Errorf("the frame has no %q:\n%s", want, first.text)
		}
	}
	if lines := strings.Split(strings.TrimRight(first.text, "\n"), "\n"); len(lines) > 40 {
		t.Errorf("the frame has %d lines on a 40-line terminal", len(lines))
	}
	if first.sort != "drops" || !strings.HasPrefix(first.flows[0].key, "udp "+tp.IPA+":2000") {
		t.Errorf("sorted by %q, first flow %q; want drops, a web flow first:\n%s", first.sort, first.flows[0].key, first.text)
	}
	t.Logf("the first frame with rates:\n%s", first.text)
	// Refresh: the totals of the bulk flow move on.
	b0, _ := first.flow(bulkKey)
	var next topFrame
	if !testutil.WaitFor(t, 15*time.Second, func() bool {
		next = parseTop(tm.capture(false))
		b, ok := next.flow(bulkKey)
		return ok && b.packets > b0.packets
	}) {
		t.Fatalf("the bulk flow's packets stayed at %v for 15 s: no refresh:\n%s", b0.packets, next.text)
	}
	// s: most packets per second first, the bulk flow (300/s against 100/s).
	tm.tmux("send-keys", "s")
	var bySort topFrame
	if !testutil.WaitFor(t, 15*time.Second, func() bool {
		bySort = parseTop(tm.capture(false))
		return bySort.sort == "packets" && len(bySort.flows) > 0 && bySort.flows[0].key == bulkKey
	}) {
		t.Fatalf("after s: sorted by %q; want packets, the bulk flow first:\n%s", bySort.sort, bySort.text)
	}
	if path := os.Getenv("PS_TOP_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, []byte(ansiHTML(tm.capture(true))), 0o644); err != nil {
			t.Error(err)
		}
	}
	// q: exit status 0.
	tm.tmux("send-keys", "q")
	var got string
	if !testutil.WaitFor(t, 15*time.Second, func() bool {
		b, err := os.ReadFile(status)
		got = strings.TrimSpace(string(b))
		return err == nil && got != ""
	}) {
		t.Fatalf("top did not exit within 15 s of q:\n%s", tm.capture(false))
	}
	if got != "0" {
		t.Errorf("top exited with status %s after q, want 0", got)
	}
}

// ansiHTML renders a capture-pane -e text as an HTML page: a dark
// terminal, reverse video for the tables' headings (the only attribute top
// uses).
func ansiHTML(capture string) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><meta charset="utf-8"><style>body{margin:0;background:#1e1e1e}pre{margin:0;padding:8px;color:#d4d4d4;font:14px/1.25 "DejaVu Sans Mono",monospace}.r{background:#d4d4d4;color:#1e1e1e}</style><pre>`)
	sgr := regexp.MustCompile(`\x1b\[([0-9;]*)m`)
	rev := false
	for _, l := range strings.Split(strings.TrimRight(capture, "\n"), "\n") {
		last := 0
		for _, m := range sgr.FindAllStringSubmatchIndex(l, -1) {
			b.WriteString(html.EscapeString(l[last:m[0]]))
			last = m[1]
			for _, p := range strings.Split(l[m[2]:m[3]], ";") {
				switch p {
				case "7":
					if !rev {
						b.WriteString(`<span class="r">`)
					}
					rev = true
				case "", "0", "27":
					if rev {
						b.WriteString(`</span>`)
					}
					rev = false
				}
			}
		}
		b.WriteString(html.EscapeString(l[last:]))
		b.WriteString("\n")
	}
	if rev {
		b.WriteString(`</span>`)
	}
	b.WriteString("</pre>\n")
	return b.String()
}
