package testutil

import "net"

// Receive reads c in a goroutine of its own until a read fails (c is
// closed), calling each with every datagram's sender and bytes (b is
// reused: each must not keep it); done is closed when it stops.
func Receive(c net.PacketConn, each func(from net.Addr, b []byte)) (done <-chan struct{}) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			each(from, buf[:n])
		}
	}()
	return ch
}
