package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2/unstable"
)

// A codec is everything the package does with a value of one kind, once:
// what TOML it takes, how it decodes, when it is given, how a default is
// set, how Format and the reference write it, and how a flag reads it. A
// field's pointer (from inRule, inMatch or inRedis) is of the kind's Go
// type: *string (kString), **string (kOptString), *Duration, **int,
// **float64, **bool, *[]string (kStrings, kStringsOrInts), *[]int or
// **Match (kTable).
type codec struct {
	want string // in a type error: "want a string"
	doc  string // in the reference
	// flagType names the kind in a flag's help (pflag's Value.Type).
	flagType string
	// takes are the TOML kinds a value may be; for a list, of its items.
	takes []unstable.Kind
	list  bool
	given func(p any) bool
	// decode stores v where p points; bad reports a value issue at a
	// node (v or an item of it).
	decode func(p any, v *unstable.Node, bad func(*unstable.Node, error))
	// set stores the default v (of the kind's value type: string,
	// Duration, int, float64, bool) where p points.
	set func(p any, v any)
	// format is the given value p points at as TOML; items, a list's
	// items so.
	format func(p any) string
	items  func(p any) []string
	// show is a default (set's v) as the reference writes it.
	show func(v any) string
	// text and parse are a flag's String and Set.
	text  func(p any) string
	parse func(p any, s string) error
}

// errEmpty is a string given empty (a value issue unless the field is
// required: Validate says what is missing).
var errEmpty = errors.New("must not be empty")

var (
	strKinds   = []unstable.Kind{unstable.String}
	intKinds   = []unstable.Kind{unstable.Integer}
	numKinds   = []unstable.Kind{unstable.Integer, unstable.Float}
	boolKinds  = []unstable.Kind{unstable.Bool}
	tableKinds = []unstable.Kind{unstable.InlineTable}
	anyKinds   = []unstable.Kind{unstable.String, unstable.Integer}
)

// optional is the codec of a kind whose Go type is **T: nil is not given.
// The reference shows a default as format writes it unless show is given.
func optional[T any](want, doc, flagType string, takes []unstable.Kind, dec func(*unstable.Node) (T, error),
	format func(T) string, parse func(string) (T, error), show ...func(T) string) codec {
	if show == nil {
		show = append(show, format)
	}
	return codec{
		want: want, doc: doc, flagType: flagType, takes: takes,
		given: func(p any) bool { return *p.(**T) != nil },
		decode: func(p any, v *unstable.Node, bad func(*unstable.Node, error)) {
			x, err := dec(v)
			if err != nil {
				bad(v, err)
			}
			*p.(**T) = &x
		},
		set:    func(p any, v any) { x := v.(T); *p.(**T) = &x },
		format: func(p any) string { return format(**p.(**T)) },
		show:   func(v any) string { return show[0](v.(T)) },
		text: func(p any) string {
			if q := *p.(**T); q != nil {
				return format(*q)
			}
			return ""
		},
		parse: func(p any, s string) error {
			x, err := parse(s)
			if err == nil {
				*p.(**T) = &x
			}
			return err
		},
	}
}

// codecs are the kinds' codecs.
var codecs = [...]codec{
	kString: {
		want: "a string", doc: "string", flagType: "string", takes: strKinds,
		given: func(p any) bool { return *p.(*string) != "" },
		decode: func(p any, v *unstable.Node, bad func(*unstable.Node, error)) {
			if *p.(*string) = string(v.Data); len(v.Data) == 0 {
				bad(v, errEmpty)
			}
		},
		set:    func(p any, v any) { *p.(*string) = v.(string) },
		format: func(p any) string { return quote(*p.(*string)) },
		show:   func(v any) string { return v.(string) },
		text:   func(p any) string { return *p.(*string) },
		parse:  func(p any, s string) error { *p.(*string) = s; return nil },
	},
	kOptString: optional("a string", "string", "string", strKinds,
		func(v *unstable.Node) (string, error) { return string(v.Data), nil },
		quote, func(s string) (string, error) { return s, nil }, func(s string) string { return s }),
	kInt: optional("an integer", "integer", "int", intKinds,
		func(v *unstable.Node) (int, error) { return tomlInt(v.Data) },
		strconv.Itoa, func(s string) (int, error) {
			n, err := strconv.Atoi(s)
			if err != nil {
				return 0, fmt.Errorf("bad integer %q", s)
			}
			return n, nil
		}),
	kNumber: optional("a number", "number", "number", numKinds,
		func(v *unstable.Node) (float64, error) {
			if v.Kind == unstable.Integer {
				n, err := tomlInt(v.Data)
				return float64(n), err
			}
			return tomlFloat(v.Data)
		},
		formatNumber, func(s string) (float64, error) {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return 0, fmt.Errorf("bad number %q", s)
			}
			return x, nil
		}),
	kBool: optional("true or false", "boolean", "bool", boolKinds,
		func(v *unstable.Node) (bool, error) { return string(v.Data) == "true", nil },
		strconv.FormatBool, strconv.ParseBool),
	kDuration: {
		want: "a string", doc: "duration (string: \"50ms\", \"1m30s\")", flagType: "duration", takes: strKinds,
		given: func(p any) bool { return *p.(*Duration) != 0 },
		decode: func(p any, v *unstable.Node, bad func(*unstable.Node, error)) {
			d, err := parseDuration(string(v.Data))
			if err != nil {
				bad(v, err)
			}
			*p.(*Duration) = Duration(d)
		},
		set:    func(p any, v any) { *p.(*Duration) = v.(Duration) },
		format: func(p any) string { return quote(formatDuration(*p.(*Duration))) },
		show:   func(v any) string { return shortDuration(v.(Duration)) },
		text: func(p any) string {
			if d := *p.(*Duration); d != 0 {
				return d.String()
			}
			return ""
		},
		parse: func(p any, s string) error {
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("bad duration %q: want a number with a unit, such as \"1s\" or \"500ms\"", s)
			}
			*p.(*Duration) = Duration(d)
			return nil
		},
	},
	kStrings:       stringList("a list of strings", "list of strings", strKinds),
	kStringsOrInts: stringList("a list of strings or integers", "list of strings or integers", anyKinds),
	kInts: {
		want: "a list of integers", doc: "list of integers", flagType: "ints", takes: intKinds, list: true,
		given: func(p any) bool { return *p.(*[]int) != nil },
		decode: func(p any, v *unstable.Node, bad func(*unstable.Node, error)) {
			out := []int{}
			for it := v.Children(); it.Next(); {
				c := it.Node()
				n, err := tomlInt(c.Data)
				if err != nil {
					bad(c, err)
				}
				out = append(out, n)
			}
			*p.(*[]int) = out
		},
		items: func(p any) []string {
			l := *p.(*[]int)
			items := make([]string, len(l))
			for i, v := range l {
				items[i] = strconv.Itoa(v)
			}
			return items
		},
	},
	kTable: {
		want: "a table", doc: "table", takes: tableKinds,
		given: func(p any) bool { return *p.(**Match) != nil },
	},
}

// stringList is the codec of a list of strings, whose items may be of the
// TOML kinds takes (an integer item is kept as its decimal string).
func stringList(want, doc string, takes []unstable.Kind) codec {
	return codec{
		want: want, doc: doc, flagType: "strings", takes: takes, list: true,
		given: func(p any) bool { return *p.(*[]string) != nil },
		decode: func(p any, v *unstable.Node, bad func(*unstable.Node, error)) {
			out := []string{}
			for it := v.Children(); it.Next(); {
				c := it.Node()
				if c.Kind != unstable.Integer {
					out = append(out, string(c.Data))
					continue
				}
				n, err := tomlInt(c.Data)
				if err != nil {
					bad(c, err)
				}
				out = append(out, strconv.Itoa(n))
			}
			*p.(*[]string) = out
		},
		items: func(p any) []string {
			l := *p.(*[]string)
			items := make([]string, len(l))
			for i, v := range l {
				items[i] = quote(v)
			}
			return items
		},
		text:  func(p any) string { return strings.Join(*p.(*[]string), ",") },
		parse: func(p any, s string) error { *p.(*[]string) = strings.Split(s, ","); return nil },
	}
}

// codec is the kind's codec (a list's format from its items).
func (k kind) codec() *codec { return &codecs[k] }

func init() {
	for k := range codecs {
		if c := &codecs[k]; c.list {
			c.format = func(p any) string { return "[" + strings.Join(c.items(p), ", ") + "]" }
		}
	}
}

// accepts reports whether a TOML value (or list item) of kind n is of k.
func (c *codec) accepts(n unstable.Kind) bool {
	for _, t := range c.takes {
		if t == n {
			return true
		}
	}
	return false
}

// shortDuration is d as a person writes it: "1m" for 1m0s, "2h" for 2h0m0s.
func shortDuration(d Duration) string {
	s := d.String()
	for _, zero := range [...]string{"m0s", "h0m"} { // whole minutes, then hours
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}
