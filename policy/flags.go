package policy

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flags are the command line's limiter flags: one per schema field that
// has a flag, named, documented and defaulted as the schema says. Alone
// they make a one-rule File (File); a flag not given leaves its field
// unset, so that the rule takes the field's default.
type Flags struct {
	rule  Rule
	redis Redis
}

// DefineFlags defines the limiter flags on fs.
func DefineFlags(fs *flag.FlagSet) *Flags {
	fl := &Flags{}
	for i := range schema {
		f := &schema[i]
		if f.flag == "" {
			continue
		}
		var p any
		switch f.table {
		case tRule:
			p = f.inRule(&fl.rule)
		case tRedis:
			p = f.inRedis(&fl.redis)
		default:
			continue
		}
		help := f.help
		if f.def != "" && f.flagSets == "" {
			help += " (default " + f.def + ")"
		}
		fs.Var(&flagValue{p: p, sets: f.flagSets}, f.flag, help)
	}
	return fl
}

// File is the one-rule policy the flags describe: rule "default",
// matching every packet, and a [redis] table if a flag of it was given
// (with cluster for several addresses).
func (fl *Flags) File() *File {
	f := &File{Rules: []Rule{fl.rule}}
	f.Rules[0].Name = "default"
	rd := fl.redis
	for i := range schema {
		if fd := &schema[i]; fd.table == tRedis && given(fd.inRedis(&rd)) {
			cluster := len(rd.Addrs) > 1
			rd.Cluster = &cluster
			f.Redis = &rd
			break
		}
	}
	return f
}

// flagValue sets a schema field from a flag.
type flagValue struct {
	p any
	// sets makes the flag a bool that sets the (string) field to it.
	sets string
}

func (v *flagValue) IsBoolFlag() bool {
	_, b := v.p.(**bool)
	return b || v.sets != ""
}

func (v *flagValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	switch p := v.p.(type) {
	case *string:
		if v.sets != "" && *p != "" {
			return strconv.FormatBool(*p == v.sets)
		}
		return *p
	case *Duration:
		if *p == 0 {
			return ""
		}
		return p.String()
	case **float64:
		if *p != nil {
			return strconv.FormatFloat(**p, 'g', -1, 64)
		}
	case **int:
		if *p != nil {
			return strconv.Itoa(**p)
		}
	case **bool:
		if *p != nil {
			return strconv.FormatBool(**p)
		}
	case *[]string:
		return strings.Join(*p, ",")
	}
	return ""
}

func (v *flagValue) Set(s string) error {
	switch p := v.p.(type) {
	case *string:
		if v.sets != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return err
			}
			*p = ""
			if b {
				*p = v.sets
			}
			return nil
		}
		*p = s
	case *Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("bad duration %q: want a number with a unit, such as \"1s\" or \"500ms\"", s)
		}
		*p = Duration(d)
	case **float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("bad number %q", s)
		}
		*p = &x
	case **int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("bad integer %q", s)
		}
		*p = &n
	case **bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		*p = &b
	case *[]string:
		*p = strings.Split(s, ",")
	}
	return nil
}

// Type names the value's kind in a flag's help (the method pflag's
// Value adds to flag.Value; package flag ignores it).
func (v *flagValue) Type() string {
	if v.IsBoolFlag() {
		return "bool"
	}
	switch v.p.(type) {
	case *Duration:
		return "duration"
	case **float64:
		return "number"
	case **int:
		return "int"
	case *[]string:
		return "strings"
	}
	return "string"
}
