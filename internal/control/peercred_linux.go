package control

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer refuses a client that is neither root nor the shaper's own
// user, by the credentials the kernel recorded when it connected
// (SO_PEERCRED): the socket's mode 0600 keeps others out, and this holds
// even if the socket's mode or directory is loosened. The error is what
// the client is told.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil // not a Unix socket (tests): nothing to ask
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("refused: cannot read the client's credentials: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return fmt.Errorf("refused: cannot read the client's credentials (SO_PEERCRED): %w", cmpErr(err, cerr))
	}
	if own := uint32(os.Getuid()); cred.Uid != 0 && cred.Uid != own {
		return fmt.Errorf("permission denied: uid %d is neither root nor the shaper's user (uid %d); run as root", cred.Uid, own)
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
