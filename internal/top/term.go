package top

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"golang.org/x/sys/unix"
)

// Source reads a snapshot, asking for the flows in sort's order.
type Source func(sort Sort) (*Snapshot, error)

// ControlSource reads snapshots from the control socket at path: the
// status, then the first MaxFlows flows (of rule, if not "") in sort's
// order. now is the clock that stamps them.
func ControlSource(path, rule string, now func() time.Time) Source {
	return func(sort Sort) (*Snapshot, error) {
		s := &Snapshot{At: now()}
		st, err := control.GetStatus(path)
		if err != nil {
			return nil, err
		}
		s.Status = st
		end, err := control.ListFlows(path, control.Request{Rule: rule, Top: MaxFlows, Sort: sort.String()}, func(f *control.Flow) error {
			if len(s.Flows) < MaxFlows {
				s.Flows = append(s.Flows, *f)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		s.Listed = end.Listed
		return s, nil
	}
}

// Options are top's settings.
type Options struct {
	Source   Source
	Interval time.Duration
	Sort     Sort
	// Rows is the number of flow rows when the output is not a
	// terminal (a terminal's height decides otherwise); 0: 20.
	Rows int
	// Once prints one frame (after one interval, for the rates) and
	// returns; so does an output that is not a terminal.
	Once bool
	// JSON prints the frame's View as JSON (implies Once).
	JSON bool
}

// DefaultRows is Options.Rows' default.
const DefaultRows = 20

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// Run runs top: live on the terminal in and out (both terminals), or one
// frame on out when Once, JSON, or either is not a terminal.
func Run(o Options, in, out *os.File) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Rows <= 0 {
		o.Rows = DefaultRows
	}
	if o.Once || o.JSON || !IsTerminal(int(in.Fd())) || !IsTerminal(int(out.Fd())) {
		return Once(o, out, termWidth(int(out.Fd())))
	}
	return live(o, in, out)
}

// termWidth is fd's width, or 0 when it is not a terminal.
func termWidth(fd int) int {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// Once reads two snapshots an interval apart and writes one frame (width
// columns, 0: any) with o.Rows flows, or its View as JSON.
func Once(o Options, out io.Writer, width int) error {
	var m Model
	s, err := o.Source(o.Sort)
	if err != nil {
		return err
	}
	m.Update(s)
	time.Sleep(o.Interval)
	if s, err = o.Source(o.Sort); err != nil {
		return err
	}
	m.Update(s)
	v := m.View(o.Sort, o.Rows)
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	var b strings.Builder
	for _, l := range Render(&v, Layout{Width: width}, "") {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	if v.More > 0 {
		fmt.Fprintf(&b, "(%d more flows)\n", v.More)
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// ANSI sequences.
const (
	altScreenOn  = "\x1b[?1049h\x1b[?25l" // alternate screen, cursor hidden
	altScreenOff = "\x1b[?25h\x1b[?1049l"
	home         = "\x1b[H"
	clearEOL     = "\x1b[K"
	clearEOS     = "\x1b[J"
	reverse      = "\x1b[7m"
	plain        = "\x1b[0m"
)

// Frame writes lines as one screen: from the top left, each line cleared
// to its end, the rest of the screen cleared.
func Frame(lines []Line) string {
	var b strings.Builder
	b.WriteString(home)
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		if l.Head {
			b.WriteString(reverse + l.Text + plain)
		} else {
			b.WriteString(l.Text)
		}
		b.WriteString(clearEOL)
	}
	b.WriteString(clearEOS)
	return b.String()
}

// result is one refresh's outcome.
type result struct {
	s   *Snapshot
	err error
}

// live is the terminal loop: a refresh every interval (one at a time, off
// the loop, so that keys are read while the shaper answers), keys, resizes.
func live(o Options, in, out *os.File) error {
	ifd, ofd := int(in.Fd()), int(out.Fd())
	old, err := unix.IoctlGetTermios(ifd, unix.TCGETS)
	if err != nil {
		return err
	}
	// Keys one at a time, not echoed; Ctrl-C still signals.
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(ifd, unix.TCSETS, &raw); err != nil {
		return err
	}
	defer unix.IoctlSetTermios(ifd, unix.TCSETS, old)
	io.WriteString(out, altScreenOn)
	defer io.WriteString(out, altScreenOff)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	keys := make(chan byte, 16)
	go func() {
		var b [1]byte
		for {
			n, err := in.Read(b[:])
			if err != nil {
				close(keys)
				return
			}
			if n == 1 {
				keys <- b[0]
			}
		}
	}()
	results := make(chan result, 1)
	fetch := func(sort Sort) {
		go func() {
			s, err := o.Source(sort)
			results <- result{s, err}
		}()
	}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()

	var m Model
	sort := o.Sort
	inFlight, have := true, false
	var lastErr error
	fetch(sort)
	draw := func() {
		ws, err := unix.IoctlGetWinsize(ofd, unix.TIOCGWINSZ)
		l := Layout{Width: 80, Height: 24}
		if err == nil && ws.Col > 0 && ws.Row > 0 {
			l = Layout{Width: int(ws.Col), Height: int(ws.Row)}
		}
		if !have {
			msg := "packetshaper top: asking the shaper…"
			if lastErr != nil {
				msg = "packetshaper top: " + oneLine(lastErr.Error())
			}
			io.WriteString(out, Frame([]Line{{Text: clip(msg, l.Width)}, {Text: clip("q quit", l.Width)}}))
			return
		}
		status := "q quit  s sort"
		if lastErr != nil {
			status = "error: " + oneLine(lastErr.Error())
		}
		v := m.View(sort, l.FlowRows(len(m.rows)))
		io.WriteString(out, Frame(Render(&v, l, status)))
	}
	draw()
	for {
		select {
		case r := <-results:
			inFlight = false
			lastErr = r.err
			if r.err == nil {
				m.Update(r.s)
				have = true
			}
			draw()
		case <-tick.C:
			if !inFlight {
				inFlight = true
				fetch(sort)
			}
		case k, ok := <-keys:
			if !ok {
				return errors.New("the terminal closed")
			}
			switch k {
			case 'q', 'Q':
				return nil
			case 's', 'S':
				sort = sort.Next()
				draw()
			case '\f': // Ctrl-L
				io.WriteString(out, "\x1b[2J")
				draw()
			}
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				draw()
				continue
			}
			return nil
		}
	}
}

// oneLine is s on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
