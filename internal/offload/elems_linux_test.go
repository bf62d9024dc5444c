package offload

import (
	"testing"
	"time"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestParseElems reads back what setElemsMsg writes (the kernel's dump has
// the same layout, plus the expiration), and FuzzParseElems feeds it
// anything: a dump the kernel sends is read, anything else is an error,
// never a crash.
func TestParseElems(t *testing.T) {
	m, err := setElemsMsg("t", "ports4", []kelem{{key: []byte{1, 2, 3, 4}, timeout: time.Second,
		lim: expr.Limit{Type: expr.LimitTypePkts, Over: true, Rate: 10, Unit: expr.LimitTimeSecond, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := parseElems(m.Data)
	if err != nil || len(ks) != 1 || string(ks[0].key) != "\x01\x02\x03\x04" || !ks[0].limited || ks[0].expires != time.Second {
		t.Fatalf("parseElems(setElemsMsg(...)) = %+v, %v", ks, err)
	}
}

func FuzzParseElems(f *testing.F) {
	m, err := setElemsMsg("t", "ports4", []kelem{{key: make([]byte, 20), timeout: time.Second,
		lim: expr.Limit{Type: expr.LimitTypePktBytes, Over: true, Rate: 1000, Unit: expr.LimitTimeMinute, Burst: 1500}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.Data)
	cnt, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_COUNTER_PACKETS, Data: []byte{0, 0, 0, 0, 0, 0, 0, 7}}})
	ex, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_EXPR_NAME, Data: []byte("counter\x00")}, {Type: unix.NLA_F_NESTED | unix.NFTA_EXPR_DATA, Data: cnt}})
	el, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_EXPR, Data: ex}})
	list, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | 1, Data: el}})
	all, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS, Data: list}})
	f.Add(append([]byte{1, 0, 0, 0}, all...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := parseElems(b)
		if err != nil && ks != nil {
			t.Errorf("error %v with elements %+v", err, ks)
		}
	})
}
