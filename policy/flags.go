package policy

import (
	"flag"
	"strconv"
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
		if d := f.defaultDoc(); d != "" && f.flagSets == "" {
			help += " (default " + d + ")"
		}
		fs.Var(&flagValue{p: p, c: f.kind.codec(), sets: f.flagSets}, f.flag, help)
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
		if fd := &schema[i]; fd.table == tRedis && fd.given(fd.inRedis(&rd)) {
			cluster := len(rd.Addrs) > 1
			rd.Cluster = &cluster
			f.Redis = &rd
			break
		}
	}
	return f
}

// flagValue sets a schema field from a flag, through its kind's codec.
type flagValue struct {
	p any
	c *codec
	// sets makes the flag a bool that sets the (string) field to it.
	sets string
}

func (v *flagValue) IsBoolFlag() bool { return v.c == &codecs[kBool] || v.sets != "" }

func (v *flagValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	if v.sets != "" {
		if p := v.p.(*string); *p != "" {
			return strconv.FormatBool(*p == v.sets)
		}
	}
	return v.c.text(v.p)
}

func (v *flagValue) Set(s string) error {
	if v.sets == "" {
		return v.c.parse(v.p, s)
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	p := v.p.(*string)
	*p = ""
	if b {
		*p = v.sets
	}
	return nil
}

// Type names the value's kind in a flag's help (the method pflag's
// Value adds to flag.Value; package flag ignores it).
func (v *flagValue) Type() string {
	if v.IsBoolFlag() {
		return "bool"
	}
	return v.c.flagType
}
