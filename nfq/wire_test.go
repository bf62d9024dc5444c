package nfq

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// attr appends a netlink attribute.
func attr(b []byte, typ uint16, data []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(nlaHdrLen+len(data)))
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// packetMsg builds an NFQNL_MSG_PACKET message as the kernel sends it: packet
// header, a few attributes packetshaper ignores, the payload and, when the
// payload was cut, NFQA_CAP_LEN.
func packetMsg(id uint32, payload []byte, capLen int) []byte {
	b := make([]byte, nlmsgHdrLen, 256)
	b = append(b, 2, 0, 0, 7) // nfgenmsg: AF_INET, v0, queue 7
	var ph [7]byte
	binary.BigEndian.PutUint32(ph[:], id)
	binary.BigEndian.PutUint16(ph[4:], 0x0800)
	ph[6] = 1 // INPUT
	b = attr(b, nfqaPacketHdr, ph[:])
	b = attr(b, 3, []byte{0, 0, 0, 42})                        // NFQA_MARK
	b = attr(b, 5, []byte{0, 0, 0, 2})                         // NFQA_IFINDEX_INDEV
	b = attr(b, 9, []byte{0, 6, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0}) // NFQA_HWADDR
	b = attr(b, nfqaPayload, payload)
	if capLen > 0 {
		b = attr(b, nfqaCapLen, binary.BigEndian.AppendUint32(nil, uint32(capLen)))
	}
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	binary.LittleEndian.PutUint16(b[4:], nfqnlMsgPacket)
	return b
}

func errorMsg(errno int32) []byte {
	b := make([]byte, nlmsgHdrLen+4+nlmsgHdrLen)
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)))
	binary.LittleEndian.PutUint16(b[4:], nlmsgError)
	binary.LittleEndian.PutUint32(b[nlmsgHdrLen:], uint32(errno))
	return b
}

// ipv4UDP returns a 20+8+n byte IPv4/UDP packet.
func ipv4UDP(n int) []byte {
	p := make([]byte, 28+n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[9] = 17
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:], 5000)
	binary.BigEndian.PutUint16(p[22:], 9000)
	return p
}

func TestParsePacket(t *testing.T) {
	full := ipv4UDP(1000)
	for _, tc := range []struct {
		name    string
		msg     []byte
		wantLen int
		data    []byte
	}{
		{"whole", packetMsg(9, full[:100], 0), 100, full[:100]},
		{"cut to copy range", packetMsg(9, full[:64], len(full)), len(full), full[:64]},
		{"no payload", packetMsg(9, nil, 0), 0, nil},
	} {
		b := newBatch(7, 4)
		if n := b.addDatagram(tc.msg); n != len(tc.msg) {
			t.Errorf("%s: addDatagram consumed %d of %d bytes", tc.name, n, len(tc.msg))
		}
		if len(b.pkts) != 1 {
			t.Fatalf("%s: %d packets, want 1", tc.name, len(b.pkts))
		}
		p := b.pkts[0]
		if p.ID != 9 || p.HWProtocol != 0x0800 || p.Hook != 1 || p.Len != tc.wantLen || !bytes.Equal(p.Data, tc.data) {
			t.Errorf("%s: got ID %d HW %#x Hook %d Len %d len(Data) %d; want 9 0x800 1 %d %d",
				tc.name, p.ID, p.HWProtocol, p.Hook, p.Len, len(p.Data), tc.wantLen, len(tc.data))
		}
	}
}

func TestAddDatagramMultipleAndFull(t *testing.T) {
	var d []byte
	for id := uint32(1); id <= 5; id++ {
		d = append(d, packetMsg(id, ipv4UDP(8), 0)...)
		if id == 2 {
			d = append(d, errorMsg(-2)...) // a kernel error reply between packets
		}
	}
	b := newBatch(7, 3)
	n := b.addDatagram(d)
	if len(b.pkts) != 3 || n >= len(d) {
		t.Fatalf("first call: %d packets, consumed %d of %d; want 3 packets and a rest", len(b.pkts), n, len(d))
	}
	for i, p := range b.pkts {
		if p.ID != uint32(i+1) {
			t.Errorf("packet %d: ID %d", i, p.ID)
		}
	}
	if b.nlErrors != 1 || b.lastError != -2 {
		t.Errorf("error replies: %d (last %d), want 1 (-2)", b.nlErrors, b.lastError)
	}
	b.pkts = b.pkts[:0]
	if m := b.addDatagram(d[n:]); m != len(d)-n {
		t.Errorf("second call consumed %d of %d", m, len(d)-n)
	}
	if len(b.pkts) != 2 || b.pkts[0].ID != 4 || b.pkts[1].ID != 5 {
		t.Errorf("second call: %+v", b.pkts)
	}
	if b.lost != 0 {
		t.Errorf("lost = %d, want 0", b.lost)
	}
}

func TestLostFromIDGaps(t *testing.T) {
	b := newBatch(7, 16)
	for _, id := range []uint32{1, 2, 5, 6, 10} {
		b.addDatagram(packetMsg(id, ipv4UDP(8), 0))
	}
	if b.lost != 5 { // 3, 4, 7, 8, 9
		t.Errorf("lost = %d, want 5", b.lost)
	}
}

func TestAddDatagramGarbage(t *testing.T) {
	b := newBatch(7, 4)
	for _, d := range [][]byte{
		nil,
		{1, 2, 3},
		make([]byte, 16),                 // nlmsg_len 0
		packetMsg(3, ipv4UDP(8), 0)[:30], // cut inside the attributes
		append(packetMsg(4, nil, 0)[:16], 0, 0, 0, 0), // no packet header
	} {
		b.pkts = b.pkts[:0]
		b.addDatagram(d)
		for _, p := range b.pkts {
			if p.ID != 3 {
				t.Errorf("garbage %x gave packet %+v", d, p)
			}
		}
	}
}

// kernelApply simulates the kernel's handling of verdict messages: a batch
// verdict applies to every still-queued id up to its id, a plain verdict to
// its id only. It returns the verdict each queued id ended with.
func kernelApply(t *testing.T, out []byte, queued []uint32) map[uint32]Verdict {
	t.Helper()
	got := map[uint32]Verdict{}
	pending := append([]uint32(nil), queued...)
	for len(out) > 0 {
		if len(out) < verdictMsgLen {
			t.Fatalf("trailing %d bytes", len(out))
		}
		l := int(binary.LittleEndian.Uint32(out))
		if (l != verdictMsgLen && l != verdictMsgLen+markAttrLen) || l > len(out) {
			t.Fatalf("nlmsg_len %d", l)
		}
		m := out[:l]
		out = out[l:]
		typ := binary.LittleEndian.Uint16(m[4:])
		if q := binary.BigEndian.Uint16(m[18:]); q != 7 {
			t.Fatalf("queue %d in verdict", q)
		}
		if binary.LittleEndian.Uint16(m[22:]) != nfqaVerdictHdr {
			t.Fatalf("attribute type %d", binary.LittleEndian.Uint16(m[22:]))
		}
		var v Verdict
		if binary.BigEndian.Uint32(m[24:]) == nfDrop {
			v.Action = Drop
		}
		if len(m) > verdictMsgLen {
			if binary.LittleEndian.Uint16(m[32:]) != markAttrLen || binary.LittleEndian.Uint16(m[34:]) != nfqaMark {
				t.Fatalf("mark attribute header %x", m[32:36])
			}
			v.SetMark, v.Mark = true, binary.BigEndian.Uint32(m[36:])
		}
		id := binary.BigEndian.Uint32(m[28:])
		rest := pending[:0]
		for _, p := range pending {
			if (typ == nfqnlMsgVerdictBatch && p <= id) || p == id {
				got[p] = v
			} else {
				rest = append(rest, p)
			}
		}
		pending = rest
	}
	if len(pending) != 0 {
		t.Errorf("ids left without a verdict: %v", pending)
	}
	return got
}

func TestAppendVerdictsRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 500; iter++ {
		n := 1 + r.IntN(64)
		pkts := make([]Packet, n)
		vs := make([]Verdict, n)
		id := uint32(r.IntN(1000))
		runs := 0
		for i := range pkts {
			id += 1 + uint32(r.IntN(3)) // gaps: ids lost or answered earlier
			pkts[i].ID = id
			switch r.IntN(8) {
			case 0, 1:
				vs[i].Action = Drop
			case 2:
				vs[i] = Verdict{SetMark: true, Mark: 0x10}
			case 3:
				vs[i] = Verdict{SetMark: true, Mark: uint32(r.IntN(2))}
			}
			if i == 0 || vs[i] != vs[i-1] {
				runs++
			}
		}
		out, msgs := appendVerdicts(make([]byte, 0, n*maxVerdictMsgLen), 7, pkts, vs, false, 1)
		if msgs != runs || len(out) < msgs*verdictMsgLen {
			t.Fatalf("iter %d: %d messages (%d bytes) for %d runs", iter, msgs, len(out), runs)
		}
		ids := make([]uint32, n)
		for i := range pkts {
			ids[i] = pkts[i].ID
		}
		got := kernelApply(t, out, ids)
		for i, p := range pkts {
			if got[p.ID] != vs[i] {
				t.Fatalf("iter %d: packet %d (id %d) got %v, want %v", iter, i, p.ID, got[p.ID], vs[i])
			}
		}
	}
}

func TestConfigMsg(t *testing.T) {
	m := configMsg{cmd: nfqnlCfgCmdBind, params: true, copyRange: 256, maxLen: true, queueLen: 8192, flags: true, failOpen: true, ack: true}
	b := m.append(nil, 5, 77)
	want := []byte{
		// nlmsghdr: len 64, type 0x302, flags REQUEST|ACK, seq 77, pid 0
		64, 0, 0, 0, 2, 3, 5, 0, 77, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 5, // nfgenmsg: AF_UNSPEC, v0, queue 5
		8, 0, 1, 0, 1, 0, 0, 0, // NFQA_CFG_CMD: BIND
		9, 0, 2, 0, 0, 0, 1, 0, 2, 0, 0, 0, // NFQA_CFG_PARAMS: 256, COPY_PACKET (+pad)
		8, 0, 3, 0, 0, 0, 0x20, 0, // NFQA_CFG_QUEUE_MAXLEN 8192
		8, 0, 4, 0, 0, 0, 0, 1, // NFQA_CFG_MASK fail-open
		8, 0, 5, 0, 0, 0, 0, 1, // NFQA_CFG_FLAGS fail-open
	}
	if !bytes.Equal(b, want) {
		t.Errorf("config message\n got %v\nwant %v", b, want)
	}
}

func TestParseProcLine(t *testing.T) {
	ks, q, ok := parseProcLine("    5  12083    16 2   256     0    84       16  1")
	want := KernelStats{PortID: 12083, QueueTotal: 16, CopyRange: 256, QueueDropped: 0, UserDropped: 84, IDSequence: 16}
	if !ok || q != 5 || ks != want {
		t.Errorf("parseProcLine = %+v, %d, %v; want %+v, 5, true", ks, q, ok, want)
	}
	if _, _, ok := parseProcLine("garbage"); ok {
		t.Error("parseProcLine(garbage) ok")
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Queue: 3, CopyRange: 1 << 20}
	d := c.withDefaults()
	if c.CopyRange != 1<<20 || c.MaxQueueLen != 0 {
		t.Error("withDefaults modified its receiver")
	}
	if d.MaxQueueLen != DefaultMaxQueueLen || d.CopyRange != MaxCopyRange || d.ReadBuffer != DefaultReadBuffer ||
		d.BatchSize != DefaultBatchSize || d.Queue != 3 {
		t.Errorf("withDefaults = %+v", d)
	}
}

// recvBatch is a datagram set as one recvmmsg returns it: n packets of 64
// copied bytes each.
func recvBatch(n int) [][]byte {
	ds := make([][]byte, n)
	for i := range ds {
		ds[i] = packetMsg(uint32(i+1), ipv4UDP(1000)[:64], 1028)
	}
	return ds
}

// handle is the per-batch work of Run without the two system calls: parse
// every datagram, decide, encode the verdicts.
func handle(b *batch, ds [][]byte, fn Handler) int {
	msgs := 0
	for _, d := range ds {
		b.addDatagram(d)
	}
	v := b.verdicts[:len(b.pkts)]
	clear(v)
	fn(b.pkts, v, 1)
	_, m := appendVerdicts(b.out[:0], b.queue, b.pkts, v, false, 1)
	msgs += m
	b.pkts = b.pkts[:0]
	return msgs
}

func dropOdd(batch []Packet, v []Verdict, now int64) {
	for i := range batch {
		if batch[i].ID%2 == 1 {
			v[i].Action = Drop
		}
	}
}

// clearBit accepts every packet with its mark less bit 0x40000000, as the
// daemon answers the fast path's punted packets.
func clearBit(batch []Packet, v []Verdict, now int64) {
	for i := range batch {
		v[i].SetMark, v[i].Mark = true, batch[i].Mark&^0x40000000
	}
}

func TestReceivePathDoesNotAllocate(t *testing.T) {
	ds := recvBatch(64)
	b := newBatch(7, 64)
	if a := testing.AllocsPerRun(100, func() { handle(b, ds, dropOdd) }); a != 0 {
		t.Errorf("parse + decide + encode of a 64-packet batch: %v allocations, want 0", a)
	}
	// Verdicts that set the mark (the punt bit cleared): still none, and
	// one batch verdict for the run of equal marks.
	if a := testing.AllocsPerRun(100, func() { handle(b, ds, clearBit) }); a != 0 {
		t.Errorf("a 64-packet batch answered with marks: %v allocations, want 0", a)
	}
	if m := handle(b, ds, clearBit); m != 1 {
		t.Errorf("a 64-packet batch answered with one mark: %d verdict messages, want 1", m)
	}
}

func BenchmarkReceivePath(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[n], func(b *testing.B) {
			ds := recvBatch(n)
			bt := newBatch(7, 64)
			accept := func([]Packet, []Verdict, int64) {}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				handle(bt, ds, accept)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/packet")
		})
	}
}

func FuzzAddDatagram(f *testing.F) {
	f.Add(packetMsg(1, ipv4UDP(20), 0))
	f.Add(append(packetMsg(1, ipv4UDP(1000)[:64], 1028), errorMsg(-1)...))
	f.Add(packetMsg(7, nil, 0)[:25])
	f.Fuzz(func(t *testing.T, d []byte) {
		b := newBatch(7, 4)
		off := 0
		for rounds := 0; off < len(d); rounds++ {
			n := b.addDatagram(d[off:])
			if n <= 0 && !b.full() {
				t.Fatalf("no progress at offset %d of %d", off, len(d))
			}
			for _, p := range b.pkts {
				if p.Len < len(p.Data) {
					t.Fatalf("Len %d < len(Data) %d", p.Len, len(p.Data))
				}
				if len(p.Data) > 0 && !within(d, p.Data) {
					t.Fatal("Data does not point into the datagram")
				}
			}
			b.pkts = b.pkts[:0]
			off += n
			if rounds > len(d) {
				t.Fatal("addDatagram loops")
			}
		}
	})
}

// within reports whether s is a subslice of d.
func within(d, s []byte) bool {
	if len(s) == 0 || len(d) == 0 {
		return true
	}
	start := &d[0]
	for i := range d {
		if &d[i] == &s[0] {
			return i+len(s) <= len(d) && start != nil
		}
	}
	return false
}

func TestLatencyHistogram(t *testing.T) {
	// The layout (internal/hist's arithmetic, tested there): exact to the
	// µs below 1024 µs, within 1/16 above.
	for us := int64(0); us < 1<<25; us = us*9/8 + 1 {
		b := latLayout.Bucket(us)
		if latLayout.Upper(b) < us || (b > 0 && latLayout.Upper(b-1) >= us) {
			t.Fatalf("%d µs in bucket %d, which covers up to %d (previous up to %d)", us, b, latLayout.Upper(b), latLayout.Upper(b-1))
		}
		if us >= 1024 && float64(latLayout.Upper(b)-us) > float64(us)/16 {
			t.Fatalf("%d µs: bucket upper bound %d is more than 1/16 above", us, latLayout.Upper(b))
		}
	}
	h := newLatencyHist()
	for i := int64(1); i <= 1000; i++ {
		h.add(i * 1000) // 1..1000 µs
	}
	h.add(5e6) // one 5 ms outlier
	h.addSum(500500 * 1000)
	h.addSum(5e6)
	hist := h.histogram([]time.Duration{0, time.Microsecond, 10 * time.Microsecond, 999*time.Microsecond + 999, time.Millisecond,
		4 * time.Millisecond, 5 * time.Millisecond, 5*time.Millisecond + 200*time.Microsecond, time.Second})
	// A latency of 10 µs is kept as [10, 11) µs: known to be at most 10 µs
	// only at 11 µs. The 5 ms outlier is kept as [4864, 5120) µs.
	if want := []uint64{0, 0, 9, 999, 999, 1000, 1000, 1001, 1001}; !slices.Equal(hist.Cumulative, want) || hist.Count != 1001 || hist.Sum != 505500*time.Microsecond {
		t.Errorf("histogram = %+v, want count 1001, sum 505.5ms, cumulative %v", hist, want)
	}
	s := h.stats()
	if s.Count != 1001 || s.P50 != 502*time.Microsecond || s.P99 != 992*time.Microsecond || s.Max != 5*time.Millisecond {
		t.Errorf("stats = %+v; want Count 1001, P50 502µs, P99 992µs (bucket upper bounds), Max 5ms", s)
	}
}

// wantNoParseAllocs fails t (naming what) if handling the packet message
// d allocates.
func wantNoParseAllocs(t *testing.T, what string, d []byte) {
	t.Helper()
	ds := [][]byte{d}
	bt := newBatch(7, 4)
	if a := testing.AllocsPerRun(100, func() { handle(bt, ds, dropOdd) }); a != 0 {
		t.Errorf("parse with %s: %v allocations, want 0", what, a)
	}
}

// wantCfgFlags fails t (naming what) unless m, for queue 5, ends with
// NFQA_CFG_MASK mask and NFQA_CFG_FLAGS flags.
func wantCfgFlags(t *testing.T, what string, m configMsg, mask, flags byte) {
	t.Helper()
	b := m.append(nil, 5, 1)
	want := []byte{
		8, 0, 4, 0, 0, 0, 0, mask, // NFQA_CFG_MASK
		8, 0, 5, 0, 0, 0, 0, flags, // NFQA_CFG_FLAGS
	}
	if !bytes.HasSuffix(b, want) {
		t.Errorf("%s: message ends %v, want %v", what, b[len(b)-16:], want)
	}
}
