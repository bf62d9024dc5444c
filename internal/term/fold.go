// Package term writes for a terminal: whether stderr is one, a text log
// wrapped at its width, a progress bar.
//
// It imports nothing of ours: any package may use it.
package term

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A text log on a terminal: a stats line holds every counter (the final
// one some 900 characters), so on a terminal each line is wrapped at
// spaces to its width, the continuation lines indented; a pipe, a file or
// the journal gets each record on one line, and --log-format json whole
// records for a machine.

// foldIndent starts each continuation line of a wrapped log line.
const foldIndent = "    "

// LogWriter is where the text log goes: stderr itself, or on a terminal a
// foldWriter at its width.
func LogWriter(stderr io.Writer) io.Writer {
	f, ok := stderr.(*os.File)
	if !ok || !IsTerminal(stderr) {
		return stderr
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col < 40 {
		return stderr
	}
	return &foldWriter{w: stderr, width: int(ws.Col)}
}

// foldWriter wraps each line written to it at spaces to width columns.
// slog's handlers write one whole record per Write.
type foldWriter struct {
	w     io.Writer
	width int
	buf   []byte
}

func (f *foldWriter) Write(p []byte) (int, error) {
	f.buf = fold(f.buf[:0], p, f.width)
	if _, err := f.w.Write(f.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// fold appends p to dst with every line longer than width broken at its
// last space before width (a word longer than a line stays whole), the
// continuation lines starting with foldIndent.
func fold(dst, p []byte, width int) []byte {
	for len(p) > 0 {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		first := true
		for {
			limit := width
			if !first {
				limit -= len(foldIndent)
				dst = append(dst, foldIndent...)
			}
			if len(line) <= limit {
				dst = append(dst, line...)
				break
			}
			cut := bytes.LastIndexByte(line[:limit+1], ' ')
			if cut <= 0 {
				if cut = bytes.IndexByte(line, ' '); cut < 0 {
					dst = append(dst, line...)
					break
				}
			}
			dst = append(dst, line[:cut]...)
			dst = append(dst, '\n')
			line, first = line[cut+1:], false
		}
		dst = append(dst, '\n')
	}
	return dst
}

// IsTerminal reports whether w is a terminal (a file whose termios can be
// read).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Bar draws a one-line progress bar on a terminal, once what it shows
// has run for more than a second (packetshaper replay's). A nil Bar's
// Clear does nothing.
type Bar struct {
	w     io.Writer
	start time.Time
	drawn bool
}

// NewBar is a Bar on w of a run started at start.
func NewBar(w io.Writer, start time.Time) *Bar { return &Bar{w: w, start: start} }

// Update draws the bar: file, the bytes of it read of size (0: unknown),
// the packets so far.
func (b *Bar) Update(file string, read, size int64, packets uint64) {
	el := time.Since(b.start)
	if el < time.Second {
		return
	}
	const width = 30
	line := fmt.Sprintf("\r%s: %d packets", file, packets)
	if size > 0 {
		frac := min(float64(read)/float64(size), 1)
		n := int(frac * width)
		line = fmt.Sprintf("\r[%s%s] %3.0f%% %s: %d packets", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, file, packets)
	}
	fmt.Fprint(b.w, line+"\x1b[K")
	b.drawn = true
}

// Clear erases the bar, if drawn.
func (b *Bar) Clear() {
	if b != nil && b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
