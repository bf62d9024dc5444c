//go:build linux

package fastpath

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/replay"
	"github.com/packetshaper/packetshaper/shaper"
)

// captureFrames reads a capture of testdata/ as Ethernet frames for the
// program (the IP packet replay's Decap finds, behind an Ethernet header of
// its version's ethertype) and its records' times. Non-IP records are left
// out, as the program passes them untouched and the queue never sees them.
func captureFrames(t *testing.T, path string) ([]frame, []int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	rd, err := replay.NewReader(f)
	if err != nil {
		return nil, nil, err
	}
	var frames []frame
	var times []int64
	for {
		data, ci, lt, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return frames, times, err // a cut capture: keep what was read
		}
		ip, isIP := replay.Decap(lt, data)
		if !isIP {
			continue
		}
		if len(ip) < 20 || ip[0]>>4 == 6 && len(ip) < 40 {
			// BPF_PROG_TEST_RUN refuses a frame whose IP header is
			// cut short (EINVAL); the program punts such packets
			// (decode: wire < 20 or < 40) as the malformed ones
			// they are, and the kernel's IP layer drops them.
			t.Logf("%s: a record with %d bytes of IP header: not run", filepath.Base(path), len(ip))
			continue
		}
		b := make([]byte, 14+len(ip))
		et := uint16(0x0800)
		if len(ip) > 0 && ip[0]>>4 == 6 {
			et = 0x86dd
		}
		binary.BigEndian.PutUint16(b[12:], et)
		copy(b[14:], ip)
		frames = append(frames, frame{b: b, ip: b[14:]})
		times = append(times, replay.Nanos(&ci))
	}
	return frames, times, nil
}

// TestAgreementCaptures runs every capture of testdata/ through the program
// and the Go engine, under the policy-mix golden test's rule file and the
// synthetic test's mixed policy, and compares every packet as TestAgreement
// does.
func TestAgreementCaptures(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: loading eBPF programs needs CAP_BPF/CAP_NET_ADMIN")
	}
	files, _ := filepath.Glob("../../testdata/*.pcap*")
	if len(files) == 0 {
		t.Fatal("no captures in testdata/")
	}
	pmix, err := policy.Load("../../testdata/policy-mix.toml")
	if err != nil {
		t.Fatal(err)
	}
	total := result{}
	for _, pol := range []struct {
		name string
		f    *policy.File
	}{{"policy-mix.toml", pmix}, {"mixed", mixed()}} {
		s, _, err := Compile(pol.f, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			frames, times, err := captureFrames(t, path)
			if len(frames) == 0 {
				t.Logf("%s: no IP packets (%v)", filepath.Base(path), err)
				continue
			}
			// A program and an engine per capture: each starts empty.
			p := needKernel(t, s)
			c, err := pol.f.Compile(policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := shaper.NewPolicy(c.Policy())
			if err != nil {
				t.Fatal(err)
			}
			res := compare(t, p, &s, eng, frames, times, nil)
			p.Close()
			t.Logf("%s under %s: %v", filepath.Base(path), pol.name, res)
			total.n += res.n
			total.agree += res.agree
			total.kernel += res.kernel
			total.punted += res.punted
			total.drops += res.drops
		}
	}
	t.Logf("all captures: %v", total)
	if total.agree != total.n {
		t.Errorf("agreement %.3f%%, want 100%%", total.pct())
	}
	if total.drops == 0 || !strings.Contains(strings.Join(files, " "), "multiflow") {
		t.Errorf("the captures exercised no limit: %v", total)
	}
}
