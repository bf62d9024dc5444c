package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseMarkMask parses a key's mark mask: a number up to 0xffffffff with
// at least one bit set.
func parseMarkMask(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("bad mark mask %q: want a number up to 0xffffffff (such as \"0xff00\")", s)
	}
	if v == 0 {
		return 0, fmt.Errorf("bad mark mask %q: a mask of 0 takes no bit of the mark: every packet would be one flow", s)
	}
	return uint32(v), nil
}

// parseMark parses "VALUE" or "VALUE/MASK" (numbers as Go writes them:
// 0x10, 16, 0o20, 0b10000).
func parseMark(s string) (val, mask uint32, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	v, err1 := strconv.ParseUint(vs, 0, 32)
	m := uint64(math.MaxUint32)
	var err2 error
	if hasMask {
		m, err2 = strconv.ParseUint(ms, 0, 32)
	}
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad mark %q: want VALUE or VALUE/MASK, numbers up to 0xffffffff (such as \"0x10/0xff\")", s)
	}
	if m == 0 {
		return 0, 0, fmt.Errorf("bad mark %q: a mask of 0 takes no bit of the mark", s)
	}
	if v&^m != 0 {
		return 0, 0, fmt.Errorf("bad mark %q: value %#x has bits outside mask %#x", s, v, m)
	}
	return uint32(v), uint32(m), nil
}

func formatMark(v, m uint32) string {
	if m == math.MaxUint32 {
		return fmt.Sprintf("%#x", v)
	}
	return fmt.Sprintf("%#x/%#x", v, m)
}
