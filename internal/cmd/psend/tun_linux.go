package main

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// tunDev is a file descriptor attached to an existing tun device.
type tunDev struct{ fd int }

// openTun attaches to the tun device name (IFF_TUN | IFF_NO_PI: what is
// written is one IP packet, nothing before it).
func openTun(name string) (*tunDev, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return nil, e
	}
	return &tunDev{fd: fd}, nil
}

func (d *tunDev) write(b []byte) error { _, err := unix.Write(d.fd, b); return err }

func (d *tunDev) close() { unix.Close(d.fd) }
