package policy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// checkTLS checks the TLS settings of the [redis] table as written: the
// files only with tls = true, a client certificate with its key. It does
// not read the files: the store's client does when it connects
// (internal/global's TLSFiles), and names a file it cannot use.
func (rd *Redis) checkTLS(bad func(field string, j int, format string, args ...any) *Error) {
	if rd.TLS == nil || !*rd.TLS {
		for _, f := range []struct{ name, v string }{{"redis.ca-file", rd.CAFile}, {"redis.cert-file", rd.CertFile},
			{"redis.key-file", rd.KeyFile}, {"redis.server-name", rd.ServerName}} {
			if f.v != "" {
				bad(f.name, -1, "needs tls = true")
				return
			}
		}
		return
	}
	switch {
	case rd.CertFile != "" && rd.KeyFile == "":
		bad("redis.cert-file", -1, "needs key-file: the client certificate's key")
	case rd.KeyFile != "" && rd.CertFile == "":
		bad("redis.key-file", -1, "needs cert-file: the client certificate of the key")
	}
}

// plainWarning says, for a store rd reaches without TLS at an address not
// on loopback, that its replies can be read and forged on the way (issue
// 29: an impersonated store); "" when every address is a loopback one
// (an IP address of 127.0.0.0/8 or ::1, or "localhost") or tls = true.
func (rd *Redis) plainWarning() string {
	if rd == nil || (rd.TLS != nil && *rd.TLS) {
		return ""
	}
	for _, a := range rd.Addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		if ip, err := netip.ParseAddr(host); (err == nil && ip.Unmap().IsLoopback()) || strings.EqualFold(host, "localhost") {
			continue
		}
		return fmt.Sprintf("[redis]: the store %s is not on loopback and tls is off: whoever is on the way can read its replies and forge them (grant any tokens); tls = true (docs/global-limits.md, \"Security of the store\")", a)
	}
	return ""
}
