package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// The walk decodes each value it has checked the kind of (walker.check)
// into the field the schema points it at: one pass over go-toml's AST
// gives the File and every position. Problems with a value of the right
// kind (a string given empty, a bad duration, an integer that overflows)
// are value issues, reported with Validate's (the first in the file wins).

// decode stores v, of kind fd.kind, where p (from fd.inRule, inMatch or
// inRedis) points, by the kind's codec. rule is the rule's index (-1 for
// [redis]) and path the field as errors name it.
func (w *walker) decode(fd *field, p any, v *unstable.Node, rule int, path string) {
	fd.kind.codec().decode(p, v, func(n *unstable.Node, err error) {
		if err == errEmpty && fd.required {
			return // Validate says it is missing
		}
		w.vals = append(w.vals, &issue{w.nodePos(n), rule, path, err.Error()})
	})
}

// tomlInt parses a TOML integer the parser has checked the syntax of:
// decimal with an optional sign, or 0x, 0o, 0b; "_" between digits.
func tomlInt(b []byte) (int, error) {
	s := strings.ReplaceAll(string(b), "_", "")
	base, name := 10, "decimal"
	if len(s) > 2 && s[0] == '0' {
		switch s[1] {
		case 'x':
			base, name = 16, "hexadecimal"
		case 'o':
			base, name = 8, "octal"
		case 'b':
			base, name = 2, "binary"
		}
		if base != 10 {
			s = s[2:]
		}
	}
	var n int64
	var err error
	if base == 10 {
		n, err = strconv.ParseInt(s, 10, 64)
	} else {
		var u uint64
		u, err = strconv.ParseUint(s, base, 64)
		if err == nil && u > math.MaxInt64 {
			err = strconv.ErrRange
		}
		n = int64(u)
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s number is too large to fit in a 64-bit signed integer", name)
	}
	if err != nil {
		return 0, fmt.Errorf("bad integer %q", b)
	}
	return int(n), nil
}

// tomlFloat parses a TOML float the parser has checked the syntax of.
func tomlFloat(b []byte) (float64, error) {
	s := strings.ReplaceAll(string(b), "_", "")
	switch strings.TrimLeft(s, "+-") {
	case "nan":
		return math.NaN(), nil
	case "inf":
		if s[0] == '-' {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("bad number %q", b)
	}
	return x, nil
}
