package global

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testcerts"
)

// TestTLSFilesLoad: Load makes the CA the roots, the client certificate
// the one certificate, and keeps the server name; without files, the
// system's roots and no certificate.
func TestTLSFilesLoad(t *testing.T) {
	c := testcerts.Write(t, t.TempDir(), "")
	cfg, err := (&TLSFiles{CAFile: c.CA, CertFile: c.ClientCert, KeyFile: c.ClientKey, ServerName: "redis.example"}).Load()
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(c.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	if cfg.ServerName != "redis.example" || cfg.RootCAs == nil || !cfg.RootCAs.Equal(pool) || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify {
		t.Errorf("Load = %+v", cfg)
	}
	if cfg, err := (&TLSFiles{}).Load(); err != nil || cfg.RootCAs != nil || len(cfg.Certificates) != 0 {
		t.Errorf("no files: %+v, %v", cfg, err)
	}
}

// TestTLSFilesErrors: a file that cannot serve is a one-line error from
// Open, before any connection, naming the file and what is wrong with it
// (the rule file's check no longer reads them: see policy's checkTLS).
func TestTLSFilesErrors(t *testing.T) {
	dir := t.TempDir()
	c := testcerts.Write(t, dir, "")
	other := testcerts.Write(t, dir, "other-")
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files TLSFiles
		field string
		want  string
	}{
		{"ca-file missing", TLSFiles{CAFile: missing}, "CAFile", "the CA file: cannot read " + missing + ": no such file or directory"},
		{"ca-file a directory", TLSFiles{CAFile: dir}, "CAFile", "the CA file: cannot read " + dir + ": not a regular file"},
		{"ca-file name of two lines", TLSFiles{CAFile: "a\nb"}, "CAFile", "the CA file: cannot read \"a\\nb\": no such file or directory"},
		{"ca-file a device", TLSFiles{CAFile: "/dev/zero"}, "CAFile", "the CA file: cannot read /dev/zero: not a regular file"},
		{"ca-file not PEM", TLSFiles{CAFile: notPEM}, "CAFile", "the CA file " + notPEM + " holds no PEM certificate"},
		{"cert-file missing", TLSFiles{CertFile: missing, KeyFile: c.ClientKey}, "CertFile", "the client certificate: cannot read " + missing + ": no such file or directory"},
		{"key-file missing", TLSFiles{CertFile: c.ClientCert, KeyFile: missing}, "KeyFile", "the client key: cannot read " + missing + ": no such file or directory"},
		{"cert without key", TLSFiles{CertFile: c.ClientCert}, "KeyFile", "a client certificate needs its key file"},
		{"key of another certificate", TLSFiles{CertFile: c.ClientCert, KeyFile: other.ClientKey}, "CertFile",
			"the client certificate " + c.ClientCert + " and key " + other.ClientKey + ": tls: private key does not match public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := tc.files
			cl, err := Open(Config{Addrs: []string{"127.0.0.1:1"}, TLSFiles: &files})
			if err == nil {
				cl.Close()
				t.Fatal("Open took them")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || err.Error() != tc.want || strings.Contains(err.Error(), "\n") {
				t.Errorf("Open: %v (%#v), want %s: %s", err, err, tc.field, tc.want)
			}
		})
	}
}
