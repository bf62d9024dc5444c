package main

import (
	"encoding/binary"

	"github.com/gopacket/gopacket/layers"
)

// truncated: ten good records, then a record cut off in its data.
func truncated() ([]byte, error) {
	fs := multiflow()[:11]
	b, err := pcapFile(layers.LinkTypeEthernet, false, fs)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-len(fs[10].data)/2], nil
}

// hugeCaplen: a pcap declaring a 4 GiB snap length, one good record, then a
// record header claiming 2 GiB of data followed by a few bytes.
func hugeCaplen() ([]byte, error) {
	b, err := pcapFile(layers.LinkTypeEthernet, false, multiflow()[:1])
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(b[16:20], 0xffffffff)
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(t0.Unix()+1))
	binary.LittleEndian.PutUint32(hdr[8:12], 0x7fffffff)
	binary.LittleEndian.PutUint32(hdr[12:16], 0x7fffffff)
	b = append(b, hdr...)
	return append(b, make([]byte, 64)...), nil
}
