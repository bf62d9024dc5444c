package control

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// isDefaultName reports whether name is a base name DefaultPath gives:
// packetshaper.sock, packetshaper-N.sock, packetshaper-N-M.sock.
func isDefaultName(name string) bool {
	rest, ok := strings.CutPrefix(name, "packetshaper")
	if !ok {
		return false
	}
	if rest, ok = strings.CutSuffix(rest, ".sock"); !ok {
		return false
	}
	if rest == "" {
		return true
	}
	parts := strings.Split(strings.TrimPrefix(rest, "-"), "-")
	if rest[0] != '-' || len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			return false
		}
	}
	return true
}

// probeTimeout bounds the connection that tells a live socket from one
// left by a process that is gone.
const probeTimeout = 500 * time.Millisecond

// Running lists, sorted, the control sockets in dir (DefaultDir) named as
// DefaultPath names them on which a process answers: the shapers running
// with their default --control-socket. A socket nobody answers on (left by
// a process that died) is not listed. A dir that does not exist holds none.
func Running(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var live []string
	for _, e := range ents {
		if !isDefaultName(e.Name()) || e.Type() != fs.ModeSocket {
			continue
		}
		path := filepath.Join(dir, e.Name())
		// Connecting and closing without a request: the server drops
		// it without a log line.
		c, err := net.DialTimeout("unix", path, probeTimeout)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				live = append(live, path) // not ours to probe: asking it says why
			}
			continue
		}
		c.Close()
		live = append(live, path)
	}
	slices.Sort(live)
	return live, nil
}

// Choose is the control socket to ask in dir for the queues (their
// label, "0" or "20-23"): their default one if explicit (--queue given);
// else the one shaper running with a default socket in dir (whatever its
// queues, Running), or the queues' default one when none is. Several are
// an error that lists them, one a line.
func Choose(dir, queues string, explicit bool) (string, error) {
	deflt := filepath.Join(dir, filepath.Base(DefaultPath(queues)))
	if explicit {
		return deflt, nil
	}
	running, err := Running(dir)
	if err != nil {
		return "", fmt.Errorf("looking for running shapers: %w", err)
	}
	switch len(running) {
	case 0:
		return deflt, nil
	case 1:
		return running[0], nil
	}
	return "", &severalErr{running}
}

// severalErr is Choose's error when several shapers are running.
type severalErr struct{ paths []string }

func (e *severalErr) Error() string {
	return fmt.Sprintf("%d shapers are running; choose one with --queue N|N-M or --control-socket PATH:\n%s", len(e.paths), strings.Join(e.paths, "\n"))
}
