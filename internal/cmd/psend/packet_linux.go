package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// packetSocket is an AF_PACKET SOCK_DGRAM socket that sends IPv6 packets to
// one link-layer address on one device (the kernel writes the link header).
type packetSocket struct {
	fd int
	to *unix.SockaddrLinklayer
}

const ethPIPv6 = 0x86dd

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPacketSocket(ifindex int, mac net.HardwareAddr) (*packetSocket, error) {
	// Protocol 0: the socket receives nothing; it only sends.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(ethPIPv6), Ifindex: ifindex, Halen: 6}
	copy(to.Addr[:], mac)
	return &packetSocket{fd: fd, to: to}, nil
}

func (p *packetSocket) send(b []byte) error { return unix.Sendto(p.fd, b, 0, p.to) }

func (p *packetSocket) close() { unix.Close(p.fd) }
