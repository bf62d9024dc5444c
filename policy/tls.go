package policy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// TLSConfig returns the TLS settings of the connections to the store that
// rd gives (nil without tls = true), reading its certificate files. Its
// errors are one line and name the field ("redis.ca-file: ...").
func (rd *Redis) TLSConfig() (*tls.Config, error) {
	cfg, field, err := rd.loadTLS()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return cfg, nil
}

// checkTLS checks the TLS settings of the [redis] table: the files must
// be readable and hold what they are for (Validate reports it at the
// field, so that `packetshaper check` finds a missing file).
func (rd *Redis) checkTLS(bad func(field string, j int, format string, args ...any) *Error) {
	if _, field, err := rd.loadTLS(); err != nil {
		bad(field, -1, "%w", err)
	}
}

// loadTLS makes rd's TLS settings, or says which field is wrong.
func (rd *Redis) loadTLS() (*tls.Config, string, error) {
	on := rd.TLS != nil && *rd.TLS
	if !on {
		for _, f := range []struct{ name, v string }{{"redis.ca-file", rd.CAFile}, {"redis.cert-file", rd.CertFile},
			{"redis.key-file", rd.KeyFile}, {"redis.server-name", rd.ServerName}} {
			if f.v != "" {
				return nil, f.name, errors.New("needs tls = true")
			}
		}
		return nil, "", nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: rd.ServerName}
	if rd.CAFile != "" {
		pem, err := readFile(rd.CAFile)
		if err != nil {
			return nil, "redis.ca-file", err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "redis.ca-file", fmt.Errorf("%s holds no PEM certificate", show(rd.CAFile))
		}
		cfg.RootCAs = pool
	}
	switch {
	case rd.CertFile != "" && rd.KeyFile == "":
		return nil, "redis.cert-file", errors.New("needs key-file: the client certificate's key")
	case rd.KeyFile != "" && rd.CertFile == "":
		return nil, "redis.key-file", errors.New("needs cert-file: the client certificate of the key")
	case rd.CertFile != "":
		cert, err := readFile(rd.CertFile)
		if err != nil {
			return nil, "redis.cert-file", err
		}
		key, err := readFile(rd.KeyFile)
		if err != nil {
			return nil, "redis.key-file", err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, "redis.cert-file", fmt.Errorf("%s and %s: %w", show(rd.CertFile), show(rd.KeyFile), err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, "", nil
}

// show is a file name for an error of one line: as it is, or quoted if it
// holds what is not printable.
func show(name string) string {
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

// maxCertFile bounds what readFile reads.
const maxCertFile = 1 << 20

// readFile reads a file named in the rule file, with a short error: a
// regular file of at most maxCertFile bytes (not a device or a pipe).
func readFile(name string) ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read %s: %w", show(name), err)
	}
	st, err := os.Stat(name)
	if err != nil {
		return fail(err)
	}
	if !st.Mode().IsRegular() {
		return fail(errors.New("not a regular file"))
	}
	f, err := os.Open(name)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCertFile+1))
	if err != nil {
		return fail(err)
	}
	if len(b) > maxCertFile {
		return fail(fmt.Errorf("larger than %d bytes", maxCertFile))
	}
	return b, nil
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
