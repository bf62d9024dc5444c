package nfq

import (
	"encoding/binary"
)

// Wire format of nfnetlink_queue (linux/netfilter/nfnetlink_queue.h),
// written out here so that the receive path can parse messages in place.
// Netlink headers are in host byte order (little-endian on every platform
// this runs on); nfnetlink attribute payloads are big-endian.
const (
	nlmsgHdrLen      = 16 // struct nlmsghdr
	nfgenHdrLen      = 4  // struct nfgenmsg
	nlaHdrLen        = 4  // struct nlattr
	nlmsgError       = 2  // NLMSG_ERROR
	nlmFRequest      = 0x1
	nlmFAck          = 0x4
	nlaTypeMask      = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
	netlinkNetfilter = 12     // NETLINK_NETFILTER

	nfnlSubsysQueue      = 3
	nfqnlMsgPacket       = nfnlSubsysQueue<<8 | 0
	nfqnlMsgVerdict      = nfnlSubsysQueue<<8 | 1
	nfqnlMsgConfig       = nfnlSubsysQueue<<8 | 2
	nfqnlMsgVerdictBatch = nfnlSubsysQueue<<8 | 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaMark       = 3
	nfqaTimestamp  = 4
	nfqaInDev      = 5
	nfqaOutDev     = 6
	nfqaPayload    = 10
	nfqaCT         = 11 // NFQA_CT: the connection (nested ctnetlink attributes)
	nfqaCTInfo     = 12 // NFQA_CT_INFO: __be32 enum ip_conntrack_info
	nfqaCapLen     = 13
	nfqaUID        = 16
	nfqaGID        = 17

	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqaCfgMask        = 4
	nfqaCfgFlags       = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCfgCmdUnbind = 2
	nfqnlCopyPacket   = 2
	nfqaCfgFFailOpen  = 1
	nfqaCfgFConntrack = 1 << 1 // NFQA_CFG_F_CONNTRACK
	nfqaCfgFUIDGID    = 1 << 3 // NFQA_CFG_F_UID_GID

	nfDrop   = 0
	nfAccept = 1
)

// ownersFlag is the flag that asks for packets' owners: NFQA_CFG_F_UID_GID,
// or in a test a flag the kernel refuses, to take the fallback.
var ownersFlag uint32 = nfqaCfgFUIDGID

// conntrackFlag is the flag that asks for packets' connection tracking
// state: NFQA_CFG_F_CONNTRACK, or in a test a flag the kernel refuses.
var conntrackFlag uint32 = nfqaCfgFConntrack

// The kernel's enum ip_conntrack_info, as NFQA_CT_INFO carries it
// (Packet.CtInfo).
const (
	CtEstablished      = 0 // IP_CT_ESTABLISHED: a packet of a connection seen both ways
	CtRelated          = 1 // IP_CT_RELATED: related to one (an ICMP error, an FTP data connection)
	CtNew              = 2 // IP_CT_NEW: a connection's first packets, before a reply
	CtEstablishedReply = 3 // IP_CT_ESTABLISHED_REPLY: established, the reply direction
	CtRelatedReply     = 4 // IP_CT_RELATED_REPLY
	CtUntracked        = 7 // IP_CT_UNTRACKED
)

// parseCtInfo reads an NFQA_CT_INFO attribute's payload: the packet's
// enum ip_conntrack_info. ok is false if it is too short or out of the
// enum's range (0-7).
func parseCtInfo(data []byte) (info uint8, ok bool) {
	if len(data) < 4 {
		return 0, false
	}
	v := be.Uint32(data)
	if v > CtUntracked {
		return 0, false
	}
	return uint8(v), true
}

var le = binary.LittleEndian
var be = binary.BigEndian

func align4(n int) int { return (n + 3) &^ 3 }

// parsePacket decodes one NFQNL_MSG_PACKET message body (the bytes after the
// nlmsghdr and nfgenmsg) into p, in place: p.Data points into b. It reports
// false if the message has no packet header attribute, which is the only
// thing a verdict needs. It never allocates and never panics.
func parsePacket(b []byte, p *Packet) bool {
	*p = Packet{}
	haveHdr := false
	capLen := -1
	for len(b) >= nlaHdrLen {
		alen := int(le.Uint16(b))
		atype := le.Uint16(b[2:]) & nlaTypeMask
		if alen < nlaHdrLen {
			break
		}
		data := b[nlaHdrLen:]
		if alen-nlaHdrLen < len(data) {
			data = data[:alen-nlaHdrLen]
		}
		// else: the attribute runs past the buffer (a receive buffer
		// smaller than the message); use what is there.
		switch atype {
		case nfqaPacketHdr:
			// struct nfqnl_msg_packet_hdr { __be32 packet_id; __be16 hw_protocol; __u8 hook; }
			if len(data) >= 7 {
				p.ID = be.Uint32(data)
				p.HWProtocol = be.Uint16(data[4:])
				p.Hook = data[6]
				haveHdr = true
			}
		case nfqaPayload:
			p.Data = data
		case nfqaMark:
			if len(data) >= 4 {
				p.Mark = be.Uint32(data)
			}
		case nfqaInDev:
			if len(data) >= 4 {
				p.InDev = be.Uint32(data)
			}
		case nfqaOutDev:
			if len(data) >= 4 {
				p.OutDev = be.Uint32(data)
			}
		case nfqaTimestamp:
			// struct nfqnl_msg_packet_timestamp { __aligned_be64 sec; __aligned_be64 usec; }
			if len(data) >= 16 {
				p.Timestamp = int64(be.Uint64(data))*1e9 + int64(be.Uint64(data[8:]))*1e3
			}
		case nfqaCapLen:
			if len(data) >= 4 {
				capLen = int(be.Uint32(data))
			}
		case nfqaUID:
			if len(data) >= 4 {
				p.UID = be.Uint32(data)
				p.HasOwner = true
			}
		case nfqaGID:
			if len(data) >= 4 {
				p.GID = be.Uint32(data)
			}
		case nfqaCTInfo:
			p.CtInfo, p.HasCt = parseCtInfo(data)
		}
		n := align4(alen)
		if n >= len(b) {
			break
		}
		b = b[n:]
	}
	p.Len = len(p.Data)
	if capLen > p.Len {
		p.Len = capLen
	}
	return haveHdr
}

// verdictMsgLen is the size of one verdict message: nlmsghdr, nfgenmsg and
// an NFQA_VERDICT_HDR attribute holding struct nfqnl_msg_verdict_hdr;
// markAttrLen more with an NFQA_MARK attribute.
const (
	verdictMsgLen    = nlmsgHdrLen + nfgenHdrLen + nlaHdrLen + 8
	markAttrLen      = nlaHdrLen + 4
	maxVerdictMsgLen = verdictMsgLen + markAttrLen
)

// putVerdict writes one verdict message for packet id into b, which must
// hold maxVerdictMsgLen bytes, and returns its length. With batch, the
// verdict applies to every packet of the queue with an id up to and
// including id (NFQNL_MSG_VERDICT_BATCH), its mark too.
func putVerdict(b []byte, queue uint16, id uint32, v Verdict, batch bool, seq uint32) int {
	_ = b[maxVerdictMsgLen-1]
	typ := uint16(nfqnlMsgVerdict)
	if batch {
		typ = nfqnlMsgVerdictBatch
	}
	n := verdictMsgLen
	if v.SetMark {
		n += markAttrLen
	}
	le.PutUint32(b[0:], uint32(n))
	le.PutUint16(b[4:], typ)
	le.PutUint16(b[6:], nlmFRequest)
	le.PutUint32(b[8:], seq)
	le.PutUint32(b[12:], 0)
	b[16] = 0 // nfgen_family: AF_UNSPEC
	b[17] = 0 // NFNETLINK_V0
	be.PutUint16(b[18:], queue)
	le.PutUint16(b[20:], nlaHdrLen+8)
	le.PutUint16(b[22:], nfqaVerdictHdr)
	nv := uint32(nfAccept)
	if v.Action == Drop {
		nv = nfDrop
	}
	be.PutUint32(b[24:], nv)
	be.PutUint32(b[28:], id)
	if v.SetMark {
		le.PutUint16(b[32:], markAttrLen)
		le.PutUint16(b[34:], nfqaMark)
		be.PutUint32(b[36:], v.Mark)
	}
	return n
}

// appendVerdicts appends the verdicts of a batch to out (which must have
// room for len(pkts) more messages of maxVerdictMsgLen) and returns the
// bytes to send and the number of messages. A packet whose verdict has At
// set is held, not answered now (the caller keeps it, see hold).
//
// Packets are answered in runs: a run of consecutive packets with the same
// verdict (and mark) becomes one NFQNL_MSG_VERDICT_BATCH for the last id of
// the run, which the kernel applies to every queued id up to it: it walks
// its queue from the head and takes every packet until one with a higher
// id. That is safe because the kernel assigns ids in queue order and sends
// a packet's message before any later packet's: when this batch is
// answered, every packet still queued with an id below the batch's last one
// is in this batch (earlier batches have been answered in full) — unless a
// packet is held. A held packet stays queued at the head of the kernel's
// queue, with an id below every later one, so a batch verdict for a later
// id would release it too, early, with another packet's verdict. So once
// anything is held (held: packets were held before this batch; or a packet
// of this batch before), the following packets are answered one by one
// (NFQNL_MSG_VERDICT, by exact id); before that, in runs.
func appendVerdicts(out []byte, queue uint16, pkts []Packet, verdicts []Verdict, held bool, seq uint32) ([]byte, int) {
	msgs := 0
	for i := 0; i < len(pkts); i++ {
		v := verdicts[i]
		if v.At != 0 {
			held = true
			continue
		}
		// verdicts[i+1] differs from v if it is held (At).
		if !held && i+1 < len(pkts) && verdicts[i+1] == v {
			continue
		}
		n := len(out)
		out = out[:n+maxVerdictMsgLen]
		out = out[:n+putVerdict(out[n:], queue, pkts[i].ID, v, !held, seq)]
		msgs++
	}
	return out, msgs
}

// idBefore reports whether packet id a was queued before b. Ids are 32-bit
// and wrap; the kernel compares them the same way (nfq_id_after).
func idBefore(a, b uint32) bool { return int32(a-b) < 0 }

// appendReleases appends the verdicts of held packets released now, rel,
// sorted by id (idBefore), to out (room for len(rel) more messages) and
// returns the bytes and the number of messages. Every other packet with an
// id below rel's ids has been answered, except the packets still held, the
// lowest id of which is minHeld (if stillHeld): so a run of rel with equal
// verdicts whose ids are all below minHeld can be one batch verdict (a
// stop, or a single flow whose packets leave in id order, releases so);
// the rest go one by one.
func appendReleases(out []byte, queue uint16, rel []heldPkt, stillHeld bool, minHeld uint32, seq uint32) ([]byte, int) {
	msgs := 0
	for i := range rel {
		v := rel[i].verdict()
		batch := !stillHeld || idBefore(rel[i].id, minHeld)
		if batch && i+1 < len(rel) && rel[i+1].verdict() == v && (!stillHeld || idBefore(rel[i+1].id, minHeld)) {
			continue
		}
		n := len(out)
		out = out[:n+maxVerdictMsgLen]
		out = out[:n+putVerdict(out[n:], queue, rel[i].id, v, batch, seq)]
		msgs++
	}
	return out, msgs
}

// putConfig writes an NFQNL_MSG_CONFIG message into b and returns its
// length. cmd 0 means no command attribute; maxlen and params are
// included when set.
type configMsg struct {
	cmd       uint8  // nfqnlCfgCmd*; 0: none
	params    bool   // include NFQA_CFG_PARAMS (copy mode packet, copyRange)
	copyRange uint32 //
	maxLen    bool   // include NFQA_CFG_QUEUE_MAXLEN
	queueLen  uint32 //
	flags     bool   // include NFQA_CFG_MASK and NFQA_CFG_FLAGS (fail-open, owners)
	failOpen  bool   //
	owners    bool   // NFQA_CFG_F_UID_GID: each packet's socket owner
	conntrack bool   // NFQA_CFG_F_CONNTRACK: each packet's connection state
	ack       bool   // request an acknowledgement
}

func (c configMsg) append(b []byte, queue uint16, seq uint32) []byte {
	start := len(b)
	b = append(b, make([]byte, nlmsgHdrLen+nfgenHdrLen)...)
	attr := func(typ uint16, data ...byte) {
		l := nlaHdrLen + len(data)
		b = le.AppendUint16(b, uint16(l))
		b = le.AppendUint16(b, typ)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	if c.cmd != 0 {
		// struct nfqnl_msg_config_cmd { __u8 command; __u8 _pad; __be16 pf; }
		attr(nfqaCfgCmd, c.cmd, 0, 0, 0)
	}
	if c.params {
		// struct nfqnl_msg_config_params { __be32 copy_range; __u8 copy_mode; } __packed
		var p [5]byte
		be.PutUint32(p[:], c.copyRange)
		p[4] = nfqnlCopyPacket
		attr(nfqaCfgParams, p[:]...)
	}
	if c.maxLen {
		attr(nfqaCfgQueueMaxlen, be.AppendUint32(nil, c.queueLen)...)
	}
	if c.flags {
		var f uint32
		mask := uint32(nfqaCfgFFailOpen)
		if c.failOpen {
			f = nfqaCfgFFailOpen
		}
		if c.owners {
			f |= ownersFlag
			mask |= ownersFlag
		}
		if c.conntrack {
			f |= conntrackFlag
			mask |= conntrackFlag
		}
		attr(nfqaCfgMask, be.AppendUint32(nil, mask)...)
		attr(nfqaCfgFlags, be.AppendUint32(nil, f)...)
	}
	h := b[start:]
	flags := uint16(nlmFRequest)
	if c.ack {
		flags |= nlmFAck
	}
	le.PutUint32(h[0:], uint32(len(h)))
	le.PutUint16(h[4:], nfqnlMsgConfig)
	le.PutUint16(h[6:], flags)
	le.PutUint32(h[8:], seq)
	le.PutUint32(h[12:], 0)
	h[16] = 0 // AF_UNSPEC
	h[17] = 0 // NFNETLINK_V0
	be.PutUint16(h[18:], queue)
	return b
}

// batch is the per-queue receive state: it turns netlink datagrams into
// packets and packets' verdicts into messages, in buffers allocated once.
type batch struct {
	queue    uint16
	pkts     []Packet  // len = packets in the current batch, cap = BatchSize
	verdicts []Verdict // cap = BatchSize
	out      []byte    // cap = BatchSize*maxVerdictMsgLen
	seq      uint32

	// kernel error replies seen (NLMSG_ERROR with a non-zero error), and
	// the last of them, negated errno as the kernel sends it.
	nlErrors  uint64
	lastError int32

	// The kernel numbers packets as it queues them, before sending them:
	// a gap in the ids is packets it queued but could not send us (socket
	// buffer full), which it then accepted (fail-open) or dropped.
	lastID uint32
	lost   uint64
}

// seen accounts for packet id having arrived.
func (b *batch) seen(id uint32) {
	if gap := id - b.lastID - 1; gap != 0 && gap < 1<<31 {
		b.lost += uint64(gap)
	}
	b.lastID = id
}

func newBatch(queue uint16, size int) *batch {
	return &batch{
		queue:    queue,
		pkts:     make([]Packet, 0, size),
		verdicts: make([]Verdict, size),
		out:      make([]byte, 0, size*maxVerdictMsgLen),
	}
}

// full reports whether no more packets fit in the batch.
func (b *batch) full() bool { return len(b.pkts) == cap(b.pkts) }

// addDatagram parses the netlink messages of one received datagram and
// appends the packets among them, until the batch is full. It returns the
// number of bytes consumed: less than len(d) only when the batch filled up
// first, and then the caller answers the batch and calls it again with the
// rest. Non-packet messages are skipped (error replies are counted).
func (b *batch) addDatagram(d []byte) int {
	off := 0
	for len(d)-off >= nlmsgHdrLen {
		if b.full() {
			return off
		}
		m := d[off:]
		mlen := int(le.Uint32(m))
		if mlen < nlmsgHdrLen {
			return len(d) // garbage: drop the rest of the datagram
		}
		if mlen > len(m) {
			mlen = len(m) // truncated datagram: parse what arrived
		}
		typ := le.Uint16(m[4:])
		body := m[nlmsgHdrLen:mlen]
		switch typ {
		case nfqnlMsgPacket:
			if len(body) >= nfgenHdrLen {
				n := len(b.pkts)
				b.pkts = b.pkts[:n+1]
				if parsePacket(body[nfgenHdrLen:], &b.pkts[n]) {
					b.seen(b.pkts[n].ID)
				} else {
					b.pkts = b.pkts[:n] // no id: nothing to answer
				}
			}
		case nlmsgError:
			if len(body) >= 4 {
				if e := int32(le.Uint32(body)); e != 0 {
					b.nlErrors++
					b.lastError = e
				}
			}
		}
		off += align4(mlen)
	}
	return len(d)
}
