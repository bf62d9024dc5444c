package replay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// pcapng block types that ngFilter passes on to pcapgo.
const (
	ngSHB = 0x0a0d0d0a // section header
	ngIDB = 1          // interface description
	ngOPB = 2          // (obsolete) packet block
	ngSPB = 3          // simple packet block
	ngEPB = 6          // enhanced packet block
)

// IDB options that ngFilter keeps: what replay uses of an interface.
const (
	ngOptEnd      = 0
	ngOptIfName   = 2
	ngOptTsResol  = 9
	ngOptTsOffset = 14
)

// maxIfName is the most bytes of an interface's name (if_name) kept. A
// policy names interfaces of at most 15 bytes (IFNAMSIZ), so a longer
// name, cut to this, still matches none.
const maxIfName = 64

// ngFilter streams a pcapng file to pcapgo's reader with only what replay
// uses, so that no block can make the reader keep memory the file does
// not pay for: pcapgo keeps every name-resolution record for the section
// (each NUL of a name a string of its own, 16 bytes for 1 byte of file),
// every interface's comment, description, filter and OS strings, and a
// string per packet comment. So:
//
//   - section headers pass without their options;
//   - interface descriptions pass with if_name (at most maxIfName bytes),
//     if_tsresol and if_tsoffset only, and at most maxInterfaces per
//     section;
//   - enhanced and obsolete packet blocks pass without their options,
//     simple packet blocks as they are;
//   - every other block (name resolution, interface statistics,
//     decryption secrets, custom and unknown blocks) is left out.
//
// Blocks are checked as they are read: a length below the block's
// minimum, not a multiple of 4, or shorter than the data it declares is an
// error. It never buffers more than one block header and an interface's
// kept options, and it does not allocate once made.
type ngFilter struct {
	src *bufio.Reader
	be  bool // the section's byte order is big-endian

	out  []byte // bytes to give out before anything else (in hdr)
	pass int64  // then bytes to copy through from src
	skip int64  // then bytes of src to drop
	tail []byte // then bytes to give out (in tailBuf): the block's trailing length

	ifaces int // interfaces in this section
	err    error
	// cut: the file ended inside a block (the error given out was
	// io.ErrUnexpectedEOF), whatever pcapgo makes of that error.
	cut     bool
	hdr     [256]byte
	tailBuf [4]byte
}

func newNgFilter(src *bufio.Reader) *ngFilter { return &ngFilter{src: src} }

func (f *ngFilter) u16(b []byte) uint16 {
	if f.be {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

func (f *ngFilter) u32(b []byte) uint32 {
	if f.be {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (f *ngFilter) put32(b []byte, v uint32) {
	if f.be {
		binary.BigEndian.PutUint32(b, v)
	} else {
		binary.LittleEndian.PutUint32(b, v)
	}
}

// Read gives the rest of the current block, or the next block, in one
// call (header, data and trailer, not one call each), without waiting for
// more input once it has some.
func (f *ngFilter) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		switch {
		case len(f.out) > 0:
			c := copy(p[n:], f.out)
			f.out = f.out[c:]
			n += c
		case f.pass > 0:
			if n > 0 && f.src.Buffered() == 0 {
				return n, nil
			}
			q := p[n:]
			if int64(len(q)) > f.pass {
				q = q[:f.pass]
			}
			c, err := f.src.Read(q)
			f.pass -= int64(c)
			n += c
			if err != nil {
				if n > 0 {
					return n, nil
				}
				return 0, f.truncated(err)
			}
		case f.skip > 0:
			d := min(f.skip, 1<<30)
			if n > 0 {
				if d = min(d, int64(f.src.Buffered())); d == 0 {
					return n, nil
				}
			}
			c, err := f.src.Discard(int(d))
			f.skip -= int64(c)
			if err != nil {
				if n > 0 {
					return n, nil
				}
				return 0, f.truncated(err)
			}
		case len(f.tail) > 0:
			c := copy(p[n:], f.tail)
			f.tail = f.tail[c:]
			n += c
		case f.err != nil:
			if n > 0 {
				return n, nil
			}
			return 0, f.err
		default:
			if n > 0 {
				// One block per call: a block may consume much more
				// input than it gives (an interface's options), and
				// what one packet read may consume is bounded (the
				// Reader's budget).
				return n, nil
			}
			if err := f.block(); err != nil {
				f.err = err
			}
		}
	}
	return n, nil
}

// truncated: the file ends inside a block (err is src's error there). It
// sets cut, so that the Reader can say so even when pcapgo's error does
// not wrap io.ErrUnexpectedEOF.
func (f *ngFilter) truncated(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		f.cut = true
		return io.ErrUnexpectedEOF
	}
	return err
}

// read fills b from src; the file may end only where a block starts
// (atStart).
func (f *ngFilter) read(b []byte, atStart bool) error {
	n, err := io.ReadFull(f.src, b)
	if err == io.EOF && atStart && n == 0 {
		return io.EOF
	}
	return f.truncated(err)
}

// block reads the next block's header and sets out, pass, skip and tail
// for it.
func (f *ngFilter) block() error {
	h := f.hdr[:]
	if err := f.read(h[:8], true); err != nil {
		return err
	}
	typ := binary.LittleEndian.Uint32(h[0:4]) // the SHB type reads the same both ways
	if typ == ngSHB {
		if err := f.read(h[8:12], false); err != nil {
			return err
		}
		switch {
		case binary.LittleEndian.Uint32(h[8:12]) == 0x1a2b3c4d:
			f.be = false
		case binary.BigEndian.Uint32(h[8:12]) == 0x1a2b3c4d:
			f.be = true
		default:
			return errors.New("pcapng section header: bad byte-order magic")
		}
		f.ifaces = 0
	} else {
		typ = f.u32(h[0:4])
	}
	length := int64(f.u32(h[4:8]))
	minLen := int64(12)
	switch typ {
	case ngSHB:
		minLen = 28
	case ngIDB:
		minLen = 20
	case ngEPB, ngOPB:
		minLen = 32
	case ngSPB:
		minLen = 16
	}
	if length < minLen || length%4 != 0 {
		return fmt.Errorf("pcapng block of type %#x: length %d is not a multiple of 4 of at least %d", typ, length, minLen)
	}
	switch typ {
	case ngSHB:
		// Version (4) and section length (8) pass; the options do not.
		if err := f.read(h[12:24], false); err != nil {
			return err
		}
		f.put32(h[4:8], 28)
		f.emit(h[:24], 0, length-24, 28)
	case ngIDB:
		if f.ifaces++; f.ifaces > maxInterfaces {
			return fmt.Errorf("more than %d interfaces in a pcapng section", maxInterfaces)
		}
		return f.idb(length)
	case ngEPB, ngOPB:
		// Interface, timestamp, captured and original length (20); the
		// data and its padding pass, the options do not.
		if err := f.read(h[8:28], false); err != nil {
			return err
		}
		data := (int64(f.u32(h[20:24])) + 3) &^ 3
		if data > length-32 {
			return fmt.Errorf("pcapng packet block: captured length %d runs past its block (%d bytes)", f.u32(h[20:24]), length)
		}
		f.put32(h[4:8], uint32(32+data))
		f.emit(h[:28], data, length-28-data, 32+data)
	case ngSPB:
		f.emit(h[:8], length-8, 0, -1)
	default:
		f.skip = length - 8
	}
	return nil
}

// emit sets the block's output: head as it is, pass bytes copied through,
// skip bytes dropped, then the trailing length tail (none if negative: it
// was in what passed).
func (f *ngFilter) emit(head []byte, pass, skip, tail int64) {
	f.out, f.pass, f.skip, f.tail = head, pass, skip, nil
	if tail >= 0 {
		f.put32(f.tailBuf[:], uint32(tail))
		f.tail = f.tailBuf[:]
	}
}

// idb reads an interface description block whose header is in hdr[:8]
// and keeps its link type, snap length, and if_name (cut to maxIfName),
// if_tsresol and if_tsoffset options.
func (f *ngFilter) idb(length int64) error {
	h := f.hdr[:]
	if err := f.read(h[8:16], false); err != nil {
		return err
	}
	out := 16
	left := length - 16 - 4 // the options' bytes
	seen := [15]bool{}
	for left >= 4 {
		var oh [4]byte
		if err := f.read(oh[:], false); err != nil {
			return err
		}
		left -= 4
		code, n := f.u16(oh[0:2]), int64(f.u16(oh[2:4]))
		if code == ngOptEnd {
			break
		}
		padded := (n + 3) &^ 3
		if padded > left {
			return fmt.Errorf("pcapng interface description: option %d of %d bytes runs past its block", code, n)
		}
		keep := int64(0)
		switch code {
		case ngOptIfName:
			keep = min(n, maxIfName)
		case ngOptTsResol:
			keep = min(n, 1)
		case ngOptTsOffset:
			keep = min(n, 8)
		}
		if keep > 0 && !seen[code] {
			seen[code] = true
			copy(h[out:], oh[:2])
			if f.be {
				binary.BigEndian.PutUint16(h[out+2:], uint16(keep))
			} else {
				binary.LittleEndian.PutUint16(h[out+2:], uint16(keep))
			}
			if err := f.read(h[out+4:out+4+int(keep)], false); err != nil {
				return err
			}
			kp := (keep + 3) &^ 3
			clear(h[out+4+int(keep) : out+4+int(kp)])
			out += 4 + int(kp)
		} else {
			keep = 0
		}
		if _, err := f.src.Discard(int(padded - keep)); err != nil {
			return f.truncated(err)
		}
		left -= padded
	}
	// End of options, and the block's new length.
	clear(h[out : out+4])
	out += 4
	f.put32(h[4:8], uint32(out+4))
	f.emit(h[:out], 0, left+4, int64(out+4))
	return nil
}
