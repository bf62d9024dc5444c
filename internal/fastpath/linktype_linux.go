package fastpath

import (
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Link header types (if_arp.h ARPHRD_*) the program decodes: frames that
// start with an Ethernet header, and frames that start with the IP header
// (L3 devices: tun, WireGuard, ipip, gre, sit, ip6tnl, PPP, raw IP modems).
var (
	etherLinks = map[uint16]string{unix.ARPHRD_ETHER: "ether", unix.ARPHRD_LOOPBACK: "loopback"}
	l3Links    = map[uint16]string{
		unix.ARPHRD_NONE: "none (tun, wireguard)", unix.ARPHRD_TUNNEL: "ipip", unix.ARPHRD_TUNNEL6: "ip6tnl",
		unix.ARPHRD_IPGRE: "gre", unix.ARPHRD_IP6GRE: "ip6gre", unix.ARPHRD_SIT: "sit",
		unix.ARPHRD_RAWIP: "rawip", unix.ARPHRD_PPP: "ppp",
	}
)

// ProgFor returns the program for the interface ifindex (in the calling
// thread's network namespace), by its link header type: the Ethernet entry
// point (fastpath) for Ethernet and loopback links, the L3 one
// (fastpath_l3: the IP header at offset 0) for L3 devices; for any other
// link type an error naming the interface and its type, so that the
// program never decodes a header it does not know as IP.
func (p *Program) ProgFor(ifindex int) (*ebpf.Program, error) {
	typ, name, err := linkType(ifindex)
	if err != nil {
		return nil, err
	}
	if _, ok := etherLinks[typ]; ok {
		return p.objs.Fastpath, nil
	}
	if _, ok := l3Links[typ]; ok {
		return p.objs.FastpathL3, nil
	}
	return nil, fmt.Errorf("interface %s: link type %d (ARPHRD) is neither Ethernet nor an IP-only device: the fast path cannot decode its frames", name, typ)
}

// linkType reads the interface's link header type (ifi_type) and name over
// rtnetlink, in the calling thread's network namespace (/sys/class/net is
// the namespace's that mounted it).
func linkType(ifindex int) (uint16, string, error) {
	name := fmt.Sprintf("%d", ifindex)
	if ifc, err := net.InterfaceByIndex(ifindex); err == nil {
		name = ifc.Name
	}
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return 0, name, fmt.Errorf("interface %s: reading its link type: %w", name, err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return 0, name, fmt.Errorf("interface %s: reading its link type: %w", name, err)
	}
	for _, m := range msgs {
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		ifi := (*syscall.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
		if int(ifi.Index) == ifindex {
			return ifi.Type, name, nil
		}
	}
	return 0, name, fmt.Errorf("interface %s: no such interface", name)
}
