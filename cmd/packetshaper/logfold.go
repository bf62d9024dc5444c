package main

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A text log on a terminal: a stats line holds every counter (the final
// one some 900 characters), so on a terminal each line is wrapped at
// spaces to its width, the continuation lines indented; a pipe, a file or
// the journal gets each record on one line, and --log-format json whole
// records for a machine.

// foldIndent starts each continuation line of a wrapped log line.
const foldIndent = "    "

// logWriter is where the text log goes: stderr itself, or on a terminal a
// foldWriter at its width.
func logWriter(stderr io.Writer) io.Writer {
	f, ok := stderr.(*os.File)
	if !ok || !isTerminal(stderr) {
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
