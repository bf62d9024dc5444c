package global

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"unicode"
)

// TLSFiles are a TLS connection's settings as files: Open reads them (see
// Config.TLSFiles). CAFile names the PEM certificates the server's must
// chain to ("": the system's); CertFile and KeyFile a client certificate
// and its key, both or neither (PEM); ServerName the name the server's
// certificate must hold ("": the host of each address).
type TLSFiles struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// maxCertFile bounds what a certificate or key file may hold.
const maxCertFile = 1 << 20

// Load reads the files into a tls.Config. Its errors are one line and
// name the file; a *ConfigError whose Field is the struct field.
func (f *TLSFiles) Load() (*tls.Config, error) {
	bad := func(field, format string, args ...any) (*tls.Config, error) {
		return nil, &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := readFile(f.CAFile)
		if err != nil {
			return bad("CAFile", "the CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return bad("CAFile", "the CA file %s holds no PEM certificate", show(f.CAFile))
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		return bad("KeyFile", "a client certificate needs its key file")
	case f.KeyFile != "" && f.CertFile == "":
		return bad("CertFile", "a client key needs its certificate file")
	case f.CertFile != "":
		cert, err := readFile(f.CertFile)
		if err != nil {
			return bad("CertFile", "the client certificate: %v", err)
		}
		key, err := readFile(f.KeyFile)
		if err != nil {
			return bad("KeyFile", "the client key: %v", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return bad("CertFile", "the client certificate %s and key %s: %v", show(f.CertFile), show(f.KeyFile), err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// show is a file name for an error of one line: as it is, or quoted if it
// holds what is not printable.
func show(name string) string {
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("%q", name)
		}
	}
	return name
}

// readFile reads a file of at most maxCertFile bytes that is a regular
// file (not a device or a pipe), with a short error.
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
