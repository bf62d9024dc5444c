package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"syscall"
	"time"
)

// Client timeouts.
const (
	dialTimeout = 2 * time.Second
	// lineTimeout bounds the wait for each answer line (a listing's first
	// line comes once the first flows are copied out).
	lineTimeout = 30 * time.Second
)

// dial connects to the control socket at path and sends req. Its errors
// are one line and say what to do.
func dial(path string, req Request) (net.Conn, *reader, error) {
	c, err := net.DialTimeout("unix", path, dialTimeout)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("no control socket at %s: is packetshaper running, with this --control-socket?", path)
		case errors.Is(err, fs.ErrPermission):
			return nil, nil, fmt.Errorf("%s: permission denied: the control socket is root's (mode 0600); run as root", path)
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, nil, fmt.Errorf("%s: nobody answers (left by a packetshaper that is gone?)", path)
		}
		return nil, nil, fmt.Errorf("%s: %w", path, unwrapOp(err))
	}
	b, _ := json.Marshal(req)
	c.SetWriteDeadline(time.Now().Add(dialTimeout))
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%s: sending the request: %w", path, unwrapOp(err))
	}
	return c, &reader{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

// reader reads answer lines.
type reader struct {
	c    net.Conn
	r    *bufio.Reader
	last time.Time // of the last read deadline set
}

// line reads one answer line; the slice is the reader's until the next.
func (r *reader) line() ([]byte, error) {
	// The deadline moves on at most every second, not at every line.
	if now := time.Now(); now.Sub(r.last) > time.Second {
		r.c.SetReadDeadline(now.Add(lineTimeout))
		r.last = now
	}
	line, err := r.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer (a status with thousands of
		// rules): gather it.
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = r.r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, unwrapOp(err)
	}
	return line, nil
}

// decode decodes an answer line into a.
func decode(line []byte, a *answer) error {
	*a = answer{}
	if err := json.Unmarshal(line, a); err != nil {
		return fmt.Errorf("bad answer line: %w", err)
	}
	if a.Error != nil {
		return &ServerError{*a.Error}
	}
	return nil
}

// next reads and decodes one answer line.
func (r *reader) next(a *answer) error {
	line, err := r.line()
	if err != nil {
		return err
	}
	return decode(line, a)
}

// ServerError is an error the server answered.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return e.Msg }

// GetStatus asks the shaper behind the control socket at path for its
// status.
func GetStatus(path string) (*Status, error) {
	c, r, err := dial(path, Request{Cmd: CmdStatus})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var a answer
	if err := r.next(&a); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if a.Status == nil {
		return nil, errors.New("status: the answer has no status")
	}
	return a.Status, nil
}

// ListFlows asks for a listing (req.Cmd is set to "flows") and calls fn for
// each flow, in the order received, until the end line, which it returns,
// or until fn returns an error, which it returns. The Flow is fn's only
// during the call.
func ListFlows(path string, req Request, fn func(*Flow) error) (*End, error) {
	req.Cmd = CmdFlows
	if err := req.check(); err != nil {
		return nil, err
	}
	c, r, err := dial(path, req)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var a answer
	var f Flow
	for {
		line, err := r.line()
		if err == nil {
			// The flow lines, nearly all of them, the short way.
			if body, ok := bytes.CutPrefix(line, []byte(flowPrefix)); ok && bytes.HasSuffix(body, []byte(flowSuffix)) {
				f = Flow{}
				if err := json.Unmarshal(body[:len(body)-len(flowSuffix)], &f); err != nil {
					return nil, fmt.Errorf("flows: bad flow line: %w", err)
				}
				if err := fn(&f); err != nil {
					return nil, err
				}
				continue
			}
			err = decode(line, &a)
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errors.New("flows: the listing was cut short (packetshaper stopped?)")
			}
			return nil, fmt.Errorf("flows: %w", err)
		}
		switch {
		case a.Flow != nil:
			if err := fn(a.Flow); err != nil {
				return nil, err
			}
		case a.End != nil:
			return a.End, nil
		default:
			return nil, errors.New("flows: an answer line with neither a flow nor the end")
		}
	}
}

// ListSorted is ListFlows with the flows in the order sort (SortDrops,
// SortPackets; "none": as received). The server orders a listing of
// req.Top flows; a whole listing is ordered here, by the client, which
// holds the flows for that (the shaper does not).
func ListSorted(path string, req Request, sort string, fn func(*Flow) error) (*End, error) {
	if req.Top > 0 || sort == "none" {
		return ListFlows(path, req, fn)
	}
	var all []Flow
	end, err := ListFlows(path, req, func(f *Flow) error { all = append(all, *f); return nil })
	if err != nil {
		return nil, err
	}
	first := FlowOrder(sort)
	slices.SortFunc(all, func(a, b Flow) int { return first(&a, &b) })
	for i := range all {
		if err := fn(&all[i]); err != nil {
			return end, err
		}
	}
	return end, nil
}
