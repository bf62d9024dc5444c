package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// github.com/google/nftables (v0.3.0, the newest) can neither add an element
// with expressions of its own (NFTA_SET_ELEM_EXPRESSIONS) nor read back more
// than one: this file does those two things on a netlink socket of its own,
// in the kernel's own message format (nf_tables.h), with the library's
// expression encoding.

// Attributes the x/sys/unix of go.mod does not name.
const (
	attrSetElemExpressions = 0xb // NFTA_SET_ELEM_EXPRESSIONS (enum nft_set_elem_attributes)
)

// elemConn is a netfilter netlink socket that adds elements with their
// expressions and dumps elements with their counters. Not safe for
// concurrent use (Offloader.connMu).
type elemConn struct{ c *netlink.Conn }

func dialElems() (*elemConn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, err
	}
	return &elemConn{c: c}, nil
}

func (e *elemConn) close() error { return e.c.Close() }

// kelem is an element to add: its key, timeout and per-element limit
// (followed by a counter of the packets over it).
type kelem struct {
	key     []byte
	timeout time.Duration
	lim     expr.Limit
}

func nfgen(family uint8, resID uint16) []byte {
	return []byte{family, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
}

// setElemsMsg is a NEWSETELEM message for set of table (family inet).
func setElemsMsg(table, set string, elems []kelem) (netlink.Message, error) {
	var list []netlink.Attribute
	for i, el := range elems {
		key, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_DATA_VALUE, Data: el.key}})
		if err != nil {
			return netlink.Message{}, err
		}
		lim, err := expr.Marshal(unix.NFPROTO_INET, &el.lim)
		if err != nil {
			return netlink.Message{}, err
		}
		cnt, err := expr.Marshal(unix.NFPROTO_INET, &expr.Counter{})
		if err != nil {
			return netlink.Message{}, err
		}
		exprs, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: lim},
			{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: cnt},
		})
		if err != nil {
			return netlink.Message{}, err
		}
		item, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY, Data: key},
			{Type: unix.NFTA_SET_ELEM_TIMEOUT, Data: binary.BigEndian.AppendUint64(nil, uint64(el.timeout.Milliseconds()))},
			// The expiration too: the kernel (6.11 on) restarts the
			// timeout of an element that exists only when told one
			// that differs from what it holds.
			{Type: unix.NFTA_SET_ELEM_EXPIRATION, Data: binary.BigEndian.AppendUint64(nil, uint64(el.timeout.Milliseconds()))},
			{Type: unix.NLA_F_NESTED | attrSetElemExpressions, Data: exprs},
		})
		if err != nil {
			return netlink.Message{}, err
		}
		list = append(list, netlink.Attribute{Type: unix.NLA_F_NESTED | uint16(i+1), Data: item})
	}
	lb, err := netlink.MarshalAttributes(list)
	if err != nil {
		return netlink.Message{}, err
	}
	data, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(table + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(set + "\x00")},
		{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS, Data: lb},
	})
	if err != nil {
		return netlink.Message{}, err
	}
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM),
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create,
		},
		Data: append(nfgen(unix.NFPROTO_INET, 0), data...),
	}, nil
}

// add adds, in one transaction, the elements of each set (by set name): all
// or none. An element that exists already keeps its limit's state and
// counter; the kernel restarts its timeout.
func (e *elemConn) add(table string, sets []string, elems [][]kelem) error {
	msgs := []netlink.Message{{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN), Flags: netlink.Request},
		Data:   nfgen(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES),
	}}
	for i, s := range sets {
		if len(elems[i]) == 0 {
			continue
		}
		m, err := setElemsMsg(table, s, elems[i])
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	n := len(msgs) - 1
	if n == 0 {
		return nil
	}
	msgs = append(msgs, netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_END), Flags: netlink.Request},
		Data:   nfgen(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES),
	})
	if _, err := e.c.SendMessages(msgs); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	// One reply (ack or error) per message that asked for one.
	var errs error
	for got := 0; got < n; {
		reply, err := e.c.Receive()
		if err != nil {
			errs = errors.Join(errs, err)
			got++
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM) {
				break // the kernel sends one error only
			}
			continue
		}
		for _, m := range reply {
			if m.Header.Type == netlink.Error {
				got++
			}
		}
	}
	return errs
}

// kstate is what a dump says of an element: its key, the time it has left,
// and the packets its counter counted (those over its limit, dropped).
type kstate struct {
	key     []byte
	expires time.Duration
	drops   uint64
	limited bool // it has a limit
}

// dump reads the elements of set.
func (e *elemConn) dump(table, set string) ([]kstate, error) {
	data, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(table + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(set + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := e.c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append(nfgen(unix.NFPROTO_INET, 0), data...),
	})
	if err != nil {
		return nil, err
	}
	var out []kstate
	for _, m := range msgs {
		ks, err := parseElems(m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	return out, nil
}

// parseElems reads the elements of one NEWSETELEM message of a dump (its
// data: the nfgenmsg header, then attributes).
func parseElems(data []byte) ([]kstate, error) {
	if len(data) < 4 {
		return nil, nil
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return nil, err
	}
	var out []kstate
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(l *netlink.AttributeDecoder) error {
			for l.Next() {
				var k kstate
				l.Nested(func(d *netlink.AttributeDecoder) error { return decodeElem(d, &k) })
				out = append(out, k)
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeElem(d *netlink.AttributeDecoder, k *kstate) error {
	d.ByteOrder = binary.BigEndian
	for d.Next() {
		switch d.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			d.Nested(func(v *netlink.AttributeDecoder) error {
				for v.Next() {
					if v.Type() == unix.NFTA_DATA_VALUE {
						k.key = v.Bytes()
					}
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_EXPIRATION:
			k.expires = time.Duration(d.Uint64()) * time.Millisecond
		case unix.NFTA_SET_ELEM_EXPR:
			d.Nested(func(x *netlink.AttributeDecoder) error { return decodeExpr(x, k) })
		case attrSetElemExpressions:
			d.Nested(func(l *netlink.AttributeDecoder) error {
				for l.Next() {
					l.Nested(func(x *netlink.AttributeDecoder) error { return decodeExpr(x, k) })
				}
				return nil
			})
		}
	}
	return nil
}

// decodeExpr notes a limit, and a counter's packets.
func decodeExpr(x *netlink.AttributeDecoder, k *kstate) error {
	x.ByteOrder = binary.BigEndian
	name := ""
	for x.Next() {
		switch x.Type() {
		case unix.NFTA_EXPR_NAME:
			name = x.String()
			k.limited = k.limited || name == "limit"
		case unix.NFTA_EXPR_DATA:
			if name != "counter" {
				continue
			}
			x.Nested(func(c *netlink.AttributeDecoder) error {
				c.ByteOrder = binary.BigEndian
				for c.Next() {
					if c.Type() == unix.NFTA_COUNTER_PACKETS {
						k.drops = c.Uint64()
					}
				}
				return nil
			})
		}
	}
	return nil
}
