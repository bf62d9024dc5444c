package main

import (
	"net"
	"syscall"
)

// setRcvBuf asks for a receive buffer of n bytes: SO_RCVBUFFORCE, which
// root may set beyond net.core.rmem_max, else SO_RCVBUF (capped by
// rmem_max). It returns the size the kernel reports (twice what it keeps for
// data, see socket(7)), or 0 if that cannot be read.
func setRcvBuf(c *net.UDPConn, n int) int {
	rc, err := c.SyscallConn()
	if err != nil {
		_ = c.SetReadBuffer(n)
		return 0
	}
	var forced error
	got := 0
	_ = rc.Control(func(fd uintptr) {
		forced = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, n)
	})
	if forced != nil {
		_ = c.SetReadBuffer(n)
	}
	_ = rc.Control(func(fd uintptr) {
		got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	return got
}
