package replay

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// MaxRecord is the longest packet record replay reads: libpcap's
// MAXIMUM_SNAPLEN (256 KiB), which also holds Linux BIG TCP packets. A
// longer record is an error, whatever snap length the file declares.
const MaxRecord = 262144

// readBudget bounds how many bytes of (decompressed) capture data one
// packet read may consume: the record itself, the blocks before it in a
// pcapng file, and what the buffered reader reads ahead. gopacket's
// readers grow large records as their bytes arrive rather than trusting
// the declared length, so a 40-byte file cannot make them allocate 4 GiB;
// the budget also stops a small gzip file that inflates to gigabytes of
// one "record" after 1 MiB, instead of after gigabytes.
const readBudget = 1 << 20

// maxInterfaces is the most interfaces a pcapng section may declare:
// gopacket keeps them all for the section (ngFilter keeps each small), and
// past this the file is refused.
const maxInterfaces = 1 << 12

// File magics, as read little-endian from the first four bytes.
const (
	magicPcapMicro   = 0xa1b2c3d4
	magicPcapNano    = 0xa1b23c4d
	magicPcapMicroBE = 0xd4c3b2a1
	magicPcapNanoBE  = 0x4d3cb2a1
	magicPcapng      = 0x0a0d0d0a
	magicKuznetzov   = 0xa1b2cd34
	magicKuznetzovBE = 0x34cdb2a1
)

// Reader reads the packet records of one capture: pcap (microsecond or
// nanosecond magic, either byte order) or pcapng (any number of sections
// and interfaces, mixed link types, per-interface timestamp resolution),
// optionally gzip-compressed, through gopacket's pcapgo.
//
// Next does not allocate in the steady state: the returned data is owned
// by the Reader and valid until the next call. Not safe for concurrent use.
type Reader struct {
	budget budgetReader
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	ngf    *ngFilter       // what pcapgo's NgReader reads from
	lt     layers.LinkType // link type of a pcap file
	n      uint64          // records returned so far
	// section counts the pcapng section headers read after the first.
	section uint64
	raw     countingReader // bytes of the file read so far
}

// NewReader reads the file header from r and returns a Reader for its
// records. Errors name no file: the caller adds it.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{}
	rd.raw.r = r
	var src io.Reader = &rd.raw
	br := bufio.NewReaderSize(src, 64<<10)
	head, err := br.Peek(2)
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		src = zr
	} else if err != nil && len(head) == 0 {
		return nil, errors.New("empty file, not a pcap or pcapng capture")
	} else {
		src = br
	}
	// The budget sits under the buffer pcapgo reads from: pcapgo wraps its
	// reader in bufio.NewReader, which returns a *bufio.Reader of at least
	// 4096 bytes as it is, so every byte it reads passes the budget.
	rd.budget = budgetReader{r: src, left: readBudget}
	br = bufio.NewReaderSize(&rd.budget, 64<<10)
	head, _ = br.Peek(4)
	if len(head) < 4 {
		return nil, fmt.Errorf("file too short for a capture header (%d bytes)", len(head))
	}
	switch magic := binary.LittleEndian.Uint32(head); magic {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE:
		rd.pcap, err = pcapgo.NewReader(br)
		if err != nil {
			return nil, rd.wrap("pcap header", err)
		}
		rd.lt = rd.pcap.LinkType()
		if !Supported(rd.lt) {
			return nil, unsupported(rd.lt)
		}
	case magicPcapng:
		// pcapgo reads the blocks replay uses, and only those: see
		// ngFilter.
		rd.ngf = newNgFilter(br)
		ngr := bufio.NewReaderSize(rd.ngf, 64<<10)
		// Interfaces are per section (cat eth0.pcapng mgmt.pcapng is
		// one file of two): pcapgo resets them, their link types and
		// timestamp resolutions at each section header, and calls back
		// at each after the first, which Section counts.
		rd.ng, err = pcapgo.NewNgReader(ngr, pcapgo.NgReaderOptions{WantMixedLinkType: true,
			SectionEndCallback: func([]pcapgo.NgInterface, pcapgo.NgSectionInfo) { rd.section++ }})
		if err == io.EOF {
			// A section header and nothing else: a valid, empty capture.
			rd.ng = nil
			return rd, nil
		}
		if err != nil {
			return nil, rd.wrap("pcapng section header", err)
		}
	case magicKuznetzov, magicKuznetzovBE:
		return nil, fmt.Errorf("unsupported capture format: Kuznetzov modified pcap (magic %08x); convert it with editcap", magic)
	default:
		return nil, fmt.Errorf("not a pcap or pcapng capture (first bytes %02x %02x %02x %02x)", head[0], head[1], head[2], head[3])
	}
	return rd, nil
}

// Next returns the next record: its bytes (owned by the Reader, valid
// until the next call), capture info and link type. At a clean end of the
// capture it returns io.EOF. Any other error means the record could not
// be read; its message says what is wrong but not the file or index.
func (r *Reader) Next() (data []byte, ci gopacket.CaptureInfo, lt layers.LinkType, err error) {
	if r.pcap == nil && r.ng == nil {
		return nil, ci, 0, io.EOF
	}
	r.budget.left = readBudget
	if r.pcap != nil {
		data, ci, err = r.pcap.ZeroCopyReadPacketData()
		lt = r.lt
	} else {
		data, ci, err = r.ng.ZeroCopyReadPacketData()
		if err == nil && len(ci.AncillaryData) > 0 {
			lt, _ = ci.AncillaryData[0].(layers.LinkType)
		}
	}
	if err != nil {
		if err == io.EOF {
			return nil, ci, 0, io.EOF
		}
		return nil, ci, 0, r.wrap("", err)
	}
	if ci.CaptureLength > MaxRecord || len(data) > MaxRecord {
		return nil, ci, 0, fmt.Errorf("capture length %d exceeds the %d-byte maximum", ci.CaptureLength, MaxRecord)
	}
	if !Supported(lt) {
		return nil, ci, lt, unsupported(lt)
	}
	r.n++
	return data, ci, lt, nil
}

// Section is the pcapng section of the last record Next returned: 0 for
// the first (and for pcap files), one more at each section header.
// Interface indices, names, link types and timestamp resolutions are a
// section's: what is cached by interface index must be dropped when
// Section changes.
func (r *Reader) Section() uint64 { return r.section }

// InterfaceName is the name (if_name) of the pcapng interface i of the
// current section, "" for pcap files and unnamed interfaces.
func (r *Reader) InterfaceName(i int) string {
	if r.ng == nil || i < 0 || i >= r.ng.NInterfaces() {
		return ""
	}
	intf, err := r.ng.Interface(i)
	if err != nil {
		return ""
	}
	return intf.Name
}

// BytesRead is how many bytes of the underlying (possibly compressed)
// file have been read so far; for progress reports.
func (r *Reader) BytesRead() int64 { return r.raw.n }

// Nanos returns ci's timestamp as nanoseconds since the Unix epoch,
// clamped to [0, MaxInt64] (pcapng timestamps can lie centuries past 2262,
// or before 1970).
func Nanos(ci *gopacket.CaptureInfo) int64 {
	if ci.Timestamp.IsZero() {
		return 0 // pcapng simple packet blocks have no timestamp
	}
	s := ci.Timestamp.Unix()
	switch {
	case s >= math.MaxInt64/1_000_000_000:
		return math.MaxInt64
	case s < 0:
		// Before 1970 (a wild pcapng if_tsoffset, a broken clock): taken
		// as the epoch, so that the engine's clock arithmetic (now -
		// window, now - last seen) cannot wrap around.
		return 0
	}
	return ci.Timestamp.UnixNano()
}

// wrap turns a reader error into a message that says what is wrong.
func (r *Reader) wrap(where string, err error) error {
	var msg string
	switch {
	case r.budget.over:
		msg = fmt.Sprintf("record larger than %d bytes (or %d bytes of blocks without a packet)", MaxRecord, readBudget)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		r.ngf != nil && r.ngf.cut: // pcapgo's "could not discard n bytes: %v" does not wrap it
		msg = "truncated: the file ends inside a record"
		if where != "" {
			msg = "truncated: the file ends inside it"
		}
	case errors.Is(err, pcapgo.ErrNgVersionMismatch):
		msg = "unsupported pcapng section version"
	default:
		msg = err.Error()
		var corrupt flate.CorruptInputError
		var internal flate.InternalError
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.As(err, &corrupt) || errors.As(err, &internal) {
			msg = "gzip: " + msg
		}
		if msg != "" {
			msg = strings.ToLower(msg[:1]) + msg[1:]
		}
	}
	if where != "" {
		return fmt.Errorf("%s: %s", where, msg)
	}
	return errors.New(msg)
}

func unsupported(lt layers.LinkType) error {
	return fmt.Errorf("unsupported link type %s (%d)", LinkTypeName(lt), uint16(lt))
}

// budgetReader fails once more than left bytes are read through it.
type budgetReader struct {
	r    io.Reader
	left int
	over bool
}

var errBudget = errors.New("read budget exceeded")

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errBudget
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	return n, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
