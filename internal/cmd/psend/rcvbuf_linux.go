package main

import (
	"net"
	"syscall"
	"unsafe"
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

// enableRxTimestamps asks the kernel for each datagram's receive timestamp
// (SO_TIMESTAMPNS): the time it entered the network stack, before any
// netfilter hook (and so before a queue held it).
func enableRxTimestamps(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// rxTimestamp returns the SCM_TIMESTAMPNS time in a datagram's control
// messages, in ns since the epoch, or 0.
func rxTimestamp(oob []byte) int64 {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
			return ts.Nano()
		}
	}
	return 0
}
