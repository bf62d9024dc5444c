// Package inetsum is the Internet checksum (RFC 1071) of the packets our
// tools and tests build by hand: IPv4 headers, UDP with its pseudo-header.
package inetsum

// Add adds b, as 16-bit big-endian words (an odd last byte padded with a
// zero), to the folded one's-complement sum start and returns the folded
// sum. A checksum field is ^ of the sum over what it covers with the field
// zero; a packet whose field is right sums to 0xffff. Sums chain:
// Add(b, Add(a, 0)) is the sum of a then b when a has an even length.
func Add(b []byte, start uint16) uint16 {
	sum := uint32(start)
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}
