//go:build !linux

package main

import (
	"errors"
	"net/netip"
	"syscall"
)

// rawSockaddr: sendmmsg is Linux only; elsewhere batches are single writes.
func rawSockaddr(c syscall.Conn, d netip.AddrPort) (syscall.RawConn, []byte, error) {
	return nil, nil, nil
}

// batcher sends one datagram n times, one write each.
type batcher struct{}

func (b *batcher) send(t *target, n int) (int, error) {
	for i := range n {
		if err := t.write(); err != nil {
			return i, err
		}
	}
	return n, nil
}

func setUDPSegment(syscall.Conn, int) error { return errors.New("UDP GSO is Linux only") }
