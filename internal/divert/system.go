package divert

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DefaultFile is the packaged service's settings: QUEUE and RULES_OPTS,
// the options its ExecStartPre gives packetshaper-rules add.
const DefaultFile = "/etc/default/packetshaper"

// commandTimeout bounds each listing command.
const commandTimeout = 10 * time.Second

// InForce lists the divert rules rules.sh installed in this network
// namespace: iptables -S, ip6tables -S and nft list table inet
// packetshaper, by their comments. A command that is missing or fails
// (not root, no table) lists none. from names the commands that listed
// some.
func InForce() (rules []Rule, from []string) {
	run := func(name string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return ""
		}
		return string(out)
	}
	for _, c := range []struct{ tool, family string }{{"iptables", IPv4}, {"ip6tables", IPv6}} {
		if rs := ParseIptables(run(c.tool, "-w", "-S"), c.family); len(rs) > 0 {
			rules = append(rules, rs...)
			from = append(from, c.tool+" -S")
		}
	}
	if rs := ParseNft(run("nft", "list", "table", "inet", "packetshaper")); len(rs) > 0 {
		rules = append(rules, rs...)
		from = append(from, "nft list table inet packetshaper")
	}
	return rules, from
}

// ReadDefault reads QUEUE and RULES_OPTS from a file such as DefaultFile
// (shell assignments; RULES_OPTS split at spaces as systemd splits it).
// A file that does not exist gives ok false and no error.
func ReadDefault(path string) (queue string, opts []string, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, false, nil
		}
		return "", nil, false, err
	}
	defer f.Close()
	queue = "0"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		k, v, found := strings.Cut(l, "=")
		if !found || strings.HasPrefix(l, "#") {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.TrimSpace(k) {
		case "QUEUE":
			queue = v
		case "RULES_OPTS":
			opts = strings.Fields(v)
		}
	}
	return queue, opts, true, sc.Err()
}
