//go:build !linux

package main

import "net"

// setRcvBuf asks for a receive buffer of n bytes; elsewhere than Linux the
// size obtained is not reported (0).
func setRcvBuf(c *net.UDPConn, n int) int {
	_ = c.SetReadBuffer(n)
	return 0
}

// enableRxTimestamps: receive timestamps are read on Linux only.
func enableRxTimestamps(c *net.UDPConn) error { return nil }

// rxTimestamp: 0 elsewhere than Linux.
func rxTimestamp(oob []byte) int64 { return 0 }
