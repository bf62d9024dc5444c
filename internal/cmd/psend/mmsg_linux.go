package main

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSockaddr returns c's raw connection and d as a sockaddr of c's
// address family (an IPv4 destination of a dual-stack IPv6 socket as
// ::ffff:a.b.c.d), for sendmmsg.
func rawSockaddr(c syscall.Conn, d netip.AddrPort) (syscall.RawConn, []byte, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	family, serr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) {
		family, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil {
		return nil, nil, err
	}
	if serr != nil {
		return nil, nil, fmt.Errorf("getsockopt SO_DOMAIN: %w", serr)
	}
	port := [2]byte{byte(d.Port() >> 8), byte(d.Port())} // network order
	switch {
	case family == unix.AF_INET && d.Addr().Is4():
		sa := &unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: d.Addr().As4()}
		sa.Port = *(*uint16)(unsafe.Pointer(&port))
		return rc, unsafe.Slice((*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet4), nil
	case family == unix.AF_INET6:
		sa := &unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: d.Addr().As16()}
		sa.Port = *(*uint16)(unsafe.Pointer(&port))
		return rc, unsafe.Slice((*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet6), nil
	}
	return nil, nil, fmt.Errorf("cannot send to %v from a socket of address family %d", d, family)
}

// batcher sends one datagram many times with sendmmsg; its buffers are
// reused from call to call.
type batcher struct {
	hs  []unix.Mmsghdr
	iov unix.Iovec
}

// send sends t n times and returns how many went out. A partial count
// comes with a nil error: the rest may be tried again.
func (b *batcher) send(t *target, n int) (int, error) {
	if n == 1 {
		if err := t.write(); err != nil {
			return 0, err
		}
		return 1, nil
	}
	if cap(b.hs) < n {
		b.hs = make([]unix.Mmsghdr, n)
	}
	hs := b.hs[:n]
	b.iov.Base = unsafe.SliceData(t.buf)
	b.iov.SetLen(len(t.buf))
	for i := range hs {
		hs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Name: &t.sa[0], Namelen: uint32(len(t.sa)), Iov: &b.iov}}
		hs[i].Hdr.SetIovlen(1)
	}
	var sent int
	var serr error
	err := t.rc.Write(func(fd uintptr) bool {
		for {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(n), 0, 0, 0)
			switch e {
			case 0:
				sent = int(r)
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until the socket is writable
			default:
				serr = e
			}
			return true
		}
	})
	if err == nil {
		err = serr
	}
	return sent, err
}

// setUDPSegment turns on UDP GSO for c: each datagram written is split by
// the kernel into datagrams of size payload bytes (UDP_SEGMENT).
func setUDPSegment(c syscall.Conn, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}); err != nil {
		return err
	}
	return serr
}
