package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/packetshaper/packetshaper/shaper"
)

// The --config file holds limiter settings, one per line:
//
//	# 100 packets/s per /24 of senders
//	pps 100
//	burst=20
//	key src
//	src-prefix4 24
//	symmetric          # a boolean alone means true
//
// The names are the limiter flags' names without dashes, and each value is
// parsed by that flag's own flag.Value (the same FlagSet machinery as the
// command line), so a file says exactly what the flags say. "#" starts a
// comment; blank lines are ignored; a name may appear once.
//
// Precedence: a limiter flag given on the command line overrides the same
// setting in the file, also at every reload; --pps or --bitrate on the
// command line replaces the file's limit (both of its pps and bitrate).

const configHelp = "read the limiter settings from `FILE`: one \"name value\" or \"name=value\" per line, names as the limiter flags without dashes (pps 100, key src, ...), # comments; a flag on the command line overrides the file. Live: SIGHUP re-reads FILE"

// maxConfigSize bounds what --config reads: a limiter file is a few lines.
const maxConfigSize = 1 << 20

func addConfigFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", configHelp)
}

// configSource is where the limiter configuration comes from: the --config
// file, if any, and the limiter flags given on the command line. load can
// be called again (on SIGHUP) to re-read the file.
type configSource struct {
	file string    // "" without --config
	cli  []setting // limiter flags set on the command line, in order
}

type setting struct{ name, value string }

// newConfigSource records the limiter flags that fs (parsed) was given on
// the command line.
func newConfigSource(fs *flag.FlagSet, file string) *configSource {
	s := &configSource{file: file}
	names := limiterFlagNames()
	fs.Visit(func(f *flag.Flag) {
		if names[f.Name] {
			// String() of the flag package's values parses back to the
			// same value (floats with 'g', -1; durations; booleans).
			s.cli = append(s.cli, setting{f.Name, f.Value.String()})
		}
	})
	return s
}

func limiterFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addLimiterFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// load reads the file (if any), applies the command-line limiter flags over
// it, and returns the engine configuration and the resulting settings as
// slog attributes. Errors are one line: "FILE:LINE: problem" for a bad line
// of the file, "FILE: problem" for what no single line caused, or the
// flags' own message for a bad command-line flag.
func (s *configSource) load() (engineConfig, []any, error) {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lf := addLimiterFlags(fs)
	var lines map[string]int // name → line of the file that set it
	if s.file != "" {
		data, err := readConfigFile(s.file)
		if err != nil {
			return engineConfig{}, nil, err
		}
		if lines, err = parseConfig(s.file, data, fs); err != nil {
			return engineConfig{}, nil, err
		}
	}
	for _, c := range s.cli {
		if c.name == "pps" || c.name == "bitrate" {
			// The command line's limit replaces the file's.
			for _, n := range []string{"pps", "bitrate"} {
				if _, ok := lines[n]; ok {
					fs.Set(n, fs.Lookup(n).DefValue)
					delete(lines, n)
				}
			}
		}
		if err := fs.Set(c.name, c.value); err != nil {
			return engineConfig{}, nil, fmt.Errorf("invalid value %q for flag -%s: %v", c.value, c.name, err)
		}
		delete(lines, c.name)
	}
	cfg, err := lf.config()
	if err != nil {
		return cfg, nil, s.explain(err, lines)
	}
	var attrs []any
	fs.VisitAll(func(f *flag.Flag) {
		if (f.Name == "pps" || f.Name == "bitrate") && f.Value.String() == f.DefValue {
			return // the other one is the limit
		}
		attrs = append(attrs, f.Name, f.Value.String())
	})
	return cfg, attrs, nil
}

// explain places an error of limiterFlags.config: on the file's line that
// set the flag it names, on the command line, or on the file as a whole.
func (s *configSource) explain(err error, lines map[string]int) error {
	msg := err.Error()
	if s.file == "" {
		return err
	}
	names := func(name string) bool {
		rest, ok := strings.CutPrefix(msg, "--"+name)
		return ok && (rest == "" || rest[0] == ' ' || rest[0] == ':')
	}
	for name, line := range lines {
		if names(name) {
			return fmt.Errorf("%s:%d: %s", s.file, line, strings.TrimPrefix(msg, "--"))
		}
	}
	for _, c := range s.cli {
		if names(c.name) {
			return err
		}
	}
	return fmt.Errorf("%s: %s", s.file, msg)
}

func readConfigFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a limiter settings file", name, maxConfigSize)
	}
	return data, nil
}

// parseConfig applies the settings in data (the contents of file) to fs,
// which holds the limiter flags only, and returns the line that set each
// name. An error is one line naming the file and the line.
func parseConfig(file string, data []byte, fs *flag.FlagSet) (map[string]int, error) {
	lines := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, a...))
		}
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value := line, ""
		if j := strings.IndexAny(line, " \t="); j >= 0 {
			name, value = line[:j], strings.TrimSpace(line[j:])
			if v, ok := strings.CutPrefix(value, "="); ok {
				value = strings.TrimSpace(v)
			}
		}
		f := fs.Lookup(name)
		if f == nil {
			if strings.HasPrefix(name, "-") && fs.Lookup(strings.TrimLeft(name, "-")) != nil {
				return nil, bad("%q: write names without dashes", name)
			}
			return nil, bad("unknown setting %q (the limiter flags' names without dashes: pps, bitrate, burst, algo, window, key, ...)", name)
		}
		if prev, ok := lines[name]; ok {
			return nil, bad("%s is already set on line %d", name, prev)
		}
		if value == "" {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				value = "true"
			} else {
				return nil, bad("%s needs a value", name)
			}
		}
		if strings.ContainsAny(value, " \t") {
			return nil, bad("%s takes one value, not %q", name, value)
		}
		if err := fs.Set(name, value); err != nil {
			return nil, bad("invalid value %q for %s: %v", value, name, err)
		}
		lines[name] = n
	}
	return lines, nil
}

// reload re-reads the configuration on SIGHUP and hands each worker a new
// engine, which the worker's own goroutine swaps in at its next batch
// (worker.decide). A bad file changes nothing.
//
// What a reload does to flows: the new engines start with empty flow tables,
// so every flow starts afresh, with a full bucket and empty windows, as
// after --flow-timeout; a reload therefore lets each flow send a burst again.
// Counters go on: the workers add the old engine's malformed and eviction
// counts to the new one's, and packets/accepted/dropped are counted by the
// queues, so what stats and metrics show never goes down. The flows gauge
// counts the new tables.
func reload(log *slog.Logger, src *configSource, ws []*worker) {
	if src.file == "" {
		log.Warn("SIGHUP: no --config file, nothing to reload")
		return
	}
	cfg, attrs, err := src.load()
	if err == nil {
		engs := make([]*shaper.Engine, len(ws))
		for i := range ws {
			if engs[i], err = newEngine(cfg); err != nil {
				break
			}
		}
		if err == nil {
			for i, w := range ws {
				w.pending.Store(engs[i])
			}
			log.Info("reloaded", append([]any{"config", src.file}, attrs...)...)
			return
		}
	}
	log.Error("reload failed, keeping the previous configuration", "err", oneLine(err.Error()))
}
