package policy

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testcerts"
)

// TestRedisTLS reads the [redis] table's TLS settings, as a table and
// dotted, and Format writes them back.
func TestRedisTLS(t *testing.T) {
	dir := t.TempDir()
	c := testcerts.Write(t, dir, "")
	for _, text := range []string{
		"[redis]\naddrs = [\"r:6379\"]\nusername = \"packetshaper\"\ntls = true\nca-file = " + q(c.CA) + "\ncert-file = " + q(c.ClientCert) +
			"\nkey-file = " + q(c.ClientKey) + "\nserver-name = \"redis.example\"\n",
		"redis.addrs = [\"r:6379\"]\nredis.username = \"packetshaper\"\nredis.tls = true\nredis.ca-file = " + q(c.CA) + "\nredis.cert-file = " + q(c.ClientCert) +
			"\nredis.key-file = " + q(c.ClientKey) + "\nredis.server-name = \"redis.example\"\n",
	} {
		f, err := Parse("p.toml", []byte(text+"[[rule]]\nname = \"g\"\npps = 10\nscope = \"global\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		want := &Redis{Addrs: []string{"r:6379"}, Username: "packetshaper", TLS: ptr(true), CAFile: c.CA, CertFile: c.ClientCert,
			KeyFile: c.ClientKey, ServerName: "redis.example"}
		if !reflect.DeepEqual(f.Redis, want) {
			t.Errorf("Redis = %+v, want %+v", f.Redis, want)
		}
		g, b := reformat(t, f)
		if !reflect.DeepEqual(g.Redis, f.Redis.WithDefaults()) {
			t.Errorf("Parse(Format(f)).Redis = %+v, want %+v\n%s", g.Redis, f.Redis.WithDefaults(), b.Bytes())
		}
	}
	// The files are the store client's to read (internal/global's
	// TLSFiles): Parse keeps the paths of files that do not exist.
	missing := filepath.Join(dir, "missing.pem")
	f, err := Parse("p.toml", []byte("redis = { addrs = [\"r:6379\"], tls = true, ca-file = "+q(missing)+", cert-file = "+q(missing)+
		", key-file = "+q(missing)+" }\n[[rule]]\nname = \"g\"\npps = 10\nscope = \"global\"\n"))
	if err != nil || f.Redis.CAFile != missing || f.Redis.CertFile != missing || f.Redis.KeyFile != missing {
		t.Errorf("missing files: %+v, %v", f, err)
	}
}

// TestRedisTLSErrors: a TLS setting that cannot work is an error at its
// place, FILE:LINE:COL, one line: half a client certificate, a setting
// without tls = true. (The files are read by the store's client:
// internal/global's TestTLSFilesErrors.)
func TestRedisTLSErrors(t *testing.T) {
	dir := t.TempDir()
	c := testcerts.Write(t, dir, "")
	head := "[redis]\naddrs = [\"r:6379\"]\ntls = true\n"
	for _, tc := range []struct{ name, in, want string }{
		{"cert without key", head + "cert-file = " + q(c.ClientCert) + "\n",
			"p.toml:4:13: redis.cert-file: needs key-file: the client certificate's key"},
		{"key without cert", head + "key-file = " + q(c.ClientKey) + "\n",
			"p.toml:4:12: redis.key-file: needs cert-file: the client certificate of the key"},
		{"ca-file without tls", "[redis]\naddrs = [\"r:6379\"]\nca-file = " + q(c.CA) + "\n",
			"p.toml:3:11: redis.ca-file: needs tls = true"},
		{"server-name with tls = false", "[redis]\naddrs = [\"r:6379\"]\ntls = false\nserver-name = \"r\"\n",
			"p.toml:4:15: redis.server-name: needs tls = true"},
		{"tls not a bool", "[redis]\naddrs = [\"r:6379\"]\ntls = \"yes\"\n",
			"p.toml:3:7: redis.tls: want true or false, not a string"},
		{"server-name empty", head + "server-name = \"\"\n",
			"p.toml:4:15: redis.server-name: must not be empty"},
		{"username empty", head + "username = \"\"\n",
			"p.toml:4:12: redis.username: must not be empty"},
		{"unknown field", head + "ca = " + q(c.CA) + "\n",
			"p.toml:4:1: redis.ca: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.toml", []byte(tc.in+"[[rule]]\nname = \"g\"\npps = 10\nscope = \"global\"\n"))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: %v, want an *Error", err)
			}
			if got := err.Error(); !strings.HasPrefix(got, tc.want) || strings.Contains(got, "\n") {
				t.Errorf("Parse:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func q(s string) string { return `"` + s + `"` }

// FuzzRedisTLS: [redis] tables with TLS settings, real files among them:
// Parse never panics, its errors are one line, and what it accepts Format
// writes back.
func FuzzRedisTLS(f *testing.F) {
	c := testcerts.Write(f, f.TempDir(), "")
	rule := "[[rule]]\nname = \"g\"\npps = 10\nscope = \"global\"\n"
	f.Add("[redis]\naddrs = [\"r:6379\"]\ntls = true\nca-file = " + q(c.CA) + "\ncert-file = " + q(c.ClientCert) +
		"\nkey-file = " + q(c.ClientKey) + "\nserver-name = \"r\"\nusername = \"u\"\n" + rule)
	f.Add("redis = { addrs = [\"r:6379\"], tls = true, ca-file = " + q(c.ClientKey) + " }\n" + rule)
	f.Add("redis.addrs = [\"r:6379\"]\nredis.ca-file = \"/dev/null\"\nredis.tls = true\n" + rule)
	f.Fuzz(func(t *testing.T, text string) {
		file, err := Parse("fuzz.toml", []byte(text))
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is a %T: %v", err, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		g, _ := reformat(t, file)
		if !reflect.DeepEqual(g.Redis, file.Redis.WithDefaults()) {
			t.Fatalf("Parse(Format(f)).Redis = %+v, want %+v", g.Redis, file.Redis.WithDefaults())
		}
	})
}
