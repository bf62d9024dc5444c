//go:build !linux

package main

import (
	"errors"
	"net"
)

type packetSocket struct{}

func openPacketSocket(int, net.HardwareAddr) (*packetSocket, error) {
	return nil, errors.New("packet sockets are Linux only")
}

func (p *packetSocket) send([]byte) error { return nil }

func (p *packetSocket) close() {}
