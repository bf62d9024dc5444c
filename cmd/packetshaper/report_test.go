package main

import (
	"bytes"
	"context"
	"flag"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"
)

var screenshot = flag.String("screenshot", "", "TestReportInBrowser also saves its screenshot of the policy-mix report to this PNG `file` (the README's: ../../docs/replay-report.png)")

// reportArgs replay policy-mix with --report to path.
func reportArgs(path string) []string {
	return []string{"--policy", testdata + "/policy-mix.toml", "--report", path, testdata + "/policy-mix.pcapng"}
}

// TestGoldenReport: the policy-mix report is the same bytes in two runs,
// whatever the report's file name, and matches the checked-in
// testdata/golden/policy-mix.report.html (-update rewrites it).
func TestGoldenReport(t *testing.T) {
	var pages [2][]byte
	for i := range pages {
		path := filepath.Join(t.TempDir(), "report"+string(rune('a'+i))+".html")
		var stdout, stderr bytes.Buffer
		if code := runReplayArgs(reportArgs(path), &stdout, &stderr); code != 0 {
			t.Fatalf("exit status %d; stderr: %s", code, stderr.String())
		}
		var err error
		if pages[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(pages[0], pages[1]) {
		t.Fatalf("the report differs between two runs:\n%s", firstDiff(pages[0], pages[1]))
	}
	golden := filepath.Join(testdata, "golden", "policy-mix.report.html")
	if *update {
		if err := os.WriteFile(golden, pages[0], 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(pages[0], want) {
		t.Errorf("the report differs from %s (go test -run TestGoldenReport -update rewrites it):\n%s", golden, firstDiff(pages[0], want))
	}
}

// TestReportDamaged: a damaged capture still gets its report, of the
// packets before the damage, with the error; the exit status is 1.
func TestReportDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--pps", "10", "--report", path, testdata + "/truncated.pcap"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit status %d, want 1; stderr: %s", code, stderr.String())
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The replay stopped early", "packet 11: truncated", `<div class="v">10</div><div class="k">packets</div>`} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestReportErrors: --report's file must not be a capture, and must be
// writable, before anything is replayed.
func TestReportErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs([]string{"--pps", "10", "--report", testdata + "/multiflow.pcap", testdata + "/multiflow.pcap"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--report") {
		t.Errorf("--report onto the capture: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := runReplayArgs([]string{"--pps", "10", "--report", filepath.Join(t.TempDir(), "no", "such", "dir.html"), testdata + "/multiflow.pcap"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "--report") {
		t.Errorf("--report into a missing directory: exit %d, stderr %q", code, stderr.String())
	}
}

// chromiumFlags run Debian's chromium headless, offline and quiet, with
// the renderer's console messages logged to stderr ("INFO:CONSOLE").
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--hide-scrollbars", "--enable-logging=stderr", "--v=0",
}

// findChromium returns the browser's path. It fails the test when the
// browser is missing and the test runs as root (scripts/test.sh installs
// it, so CI must run this test), and skips otherwise.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Geteuid() == 0 {
		t.Fatal("chromium is not installed (apt-get install chromium; scripts/test.sh does): as root this test must run")
	}
	t.Skip("skipped: chromium is not installed (apt-get install chromium) and not root")
	return ""
}

// runChromium runs the browser on url with args and returns its stdout
// and stderr. Each run gets a fresh profile; the whole process group is
// killed if it takes over 2 minutes.
func runChromium(t *testing.T, bin, url string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	profile, err := os.MkdirTemp("", "packetshaper-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append(append(append([]string{}, chromiumFlags...), "--user-data-dir="+profile), args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), errb.Bytes()
}

// consoleLines are the lines of chromium's log that report console
// messages or uncaught errors of a page.
func consoleLines(log []byte) []string {
	var lines []string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestReportInBrowser opens the policy-mix report in headless Chromium:
// the page renders with no console message (no script error, no failed
// fetch), the rendered DOM has every chart with its series, and a
// screenshot shows the charts' fills.
func TestReportInBrowser(t *testing.T) {
	bin := findChromium(t)
	dir := t.TempDir()

	// First, that the console check can fail: a page that logs an error
	// and throws must show in the log.
	probe := filepath.Join(dir, "probe.html")
	os.WriteFile(probe, []byte(`<!DOCTYPE html><p>probe</p><script>console.error("probe-console-error"); undefinedFunction();</script>`), 0o644)
	_, log := runChromium(t, bin, "file://"+probe, "--dump-dom")
	if l := consoleLines(log); len(l) < 2 || !strings.Contains(strings.Join(l, "\n"), "probe-console-error") {
		t.Fatalf("chromium's log does not show a console error and an uncaught exception of a probe page (the console check would see nothing):\n%s", log)
	}

	path := filepath.Join(dir, "report.html")
	var stdout, stderr bytes.Buffer
	if code := runReplayArgs(reportArgs(path), &stdout, &stderr); code != 0 {
		t.Fatalf("replay: exit status %d; stderr: %s", code, stderr.String())
	}
	dom, log := runChromium(t, bin, "file://"+path, "--dump-dom")
	if l := consoleLines(log); len(l) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(l, "\n"))
	}
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"totals": 5, "rule:mgmt": 3, "rule:lab": 3, "rule:dns": 3, "rule:web-trial": 3, "rule:rest": 3, "other": 3}
	got := map[string]int{}
	total := 0
	var walk func(n *html.Node, chart string)
	walk = func(n *html.Node, chart string) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				switch a.Key {
				case "data-chart":
					chart = a.Val
					got[chart] += 0
				case "data-series":
					got[chart]++
					total++
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, chart)
		}
	}
	walk(doc, "")
	for id, n := range want {
		if got[id] != n {
			t.Errorf("rendered chart %q has %d series, want %d", id, got[id], n)
		}
	}
	if len(got) != len(want) || total != 23 {
		t.Errorf("rendered charts %v (%d series), want %v (23)", got, total, want)
	}
	t.Logf("rendered DOM: %d bytes, %d charts, %d series; chromium printed %d console lines", len(dom), len(got), total, len(consoleLines(log)))

	shot := filepath.Join(dir, "report.png")
	_, log = runChromium(t, bin, "file://"+path, "--window-size=1000,1300", "--screenshot="+shot)
	if l := consoleLines(log); len(l) > 0 {
		t.Errorf("console messages while taking the screenshot:\n%s", strings.Join(l, "\n"))
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != 1000 || sz.Y != 1300 {
		t.Errorf("screenshot is %v, want 1000×1300", sz)
	}
	// The accepted (green) and dropped (red) areas, as their translucent
	// fills look on white, each cover a good part of the page.
	green, red, white := colorShare(img, [3]int{148, 201, 166}), colorShare(img, [3]int{226, 125, 113}), colorShare(img, [3]int{255, 255, 255})
	t.Logf("screenshot: %d bytes; green %.1f%%, red %.1f%%, white %.1f%% of the pixels", len(b), 100*green, 100*red, 100*white)
	if green < 0.01 || red < 0.01 || white > 0.95 {
		t.Errorf("screenshot does not show the charts: green %.3f, red %.3f, white %.3f of the pixels", green, red, white)
	}
	if *screenshot != "" {
		if err := os.WriteFile(*screenshot, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// colorShare is the share of img's pixels within 12 of c in each channel.
func colorShare(img image.Image, c [3]int) float64 {
	bd := img.Bounds()
	n := 0
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			d := [3]int{int(r>>8) - c[0], int(g>>8) - c[1], int(b>>8) - c[2]}
			if abs(d[0]) <= 12 && abs(d[1]) <= 12 && abs(d[2]) <= 12 {
				n++
			}
		}
	}
	return float64(n) / float64(bd.Dx()*bd.Dy())
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
