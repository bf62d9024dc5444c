package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/testutil"
)

// The nft backend of scripts/rules.sh, tested without nft_queue: this
// kernel (and many a CI machine's) lacks CONFIG_NFT_QUEUE, so a rule with
// the queue statement cannot be loaded. TestRulesNftDryRun checks the exact
// --dry-run output of add, del and list (no root needed); TestRulesNftApply
// applies that output, and rules.sh add itself, in a namespace of its own
// with RULES_SH_TEST_VERDICT swapping the queue statement for "accept" (only
// where the kernel refuses it), and checks table, chains, sets and rules in
// `nft -j list ruleset`, then that del removes each rule and, with the last,
// the tables.

// nftCase is an argument set of rules.sh add --backend nft.
type nftCase struct {
	name string
	args []string
	// chain is the hooked chain; rule, the rule rules.sh writes after
	// "add rule inet packetshaper CHAIN " with VERDICT for its verdict;
	// comment, the rule's tag.
	chain, rule, comment string
	// offload: what --offload adds before it (nft -f input, without the
	// here-document lines) with the offload rules' matches (JSON form) by
	// set.
	offload string
	// matches are the rule's matches as nft (1.0.6) lists them in JSON,
	// flattened by nftExprString, for TestRulesNftApply. nft's listing
	// leaves out a "meta nfproto" that a later match implies (ip saddr,
	// ipv6-icmp, a concatenation of ip fields: the kernel's rule still has
	// it, nft --debug=netlink shows), merges "meta l4proto udp th dport"
	// into "udp dport" and sorts sets; the exact --dry-run text, which is
	// what nft -f loads, is checked against rule.
	matches []string
	// drops are the offload drop rules' matches, by set.
	drops map[string][]string
}

const offloadSets = `add table inet packetshaper_offload
add set inet packetshaper_offload ports4 { type ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service; flags dynamic,timeout; timeout 10s; size 65536; }
add set inet packetshaper_offload noports4 { type ipv4_addr . ipv4_addr . inet_proto; flags dynamic,timeout; timeout 10s; size 65536; }
add set inet packetshaper_offload ports6 { type ipv6_addr . ipv6_addr . inet_proto . inet_service . inet_service; flags dynamic,timeout; timeout 10s; size 65536; }
add set inet packetshaper_offload noports6 { type ipv6_addr . ipv6_addr . inet_proto; flags dynamic,timeout; timeout 10s; size 65536; }
`

var nftCases = []nftCase{
	{
		name: "udp dport, both families", args: []string{"--queue", "0", "--proto", "udp", "--dport", "9000"},
		chain:   "input",
		rule:    `meta l4proto udp th dport 9000 ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=0 proto=udp dport=9000 family=both"`,
		comment: "packetshaper queue=0 proto=udp dport=9000 family=both",
		matches: []string{"udp dport == 9000", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "tcp, IPv4, queue range, forward", args: []string{"--queue", "2-5", "--family", "ipv4", "--proto", "tcp", "--chain", "forward"},
		chain:   "forward",
		rule:    `meta nfproto ipv4 meta l4proto tcp ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=2-5 proto=tcp family=ipv4"`,
		comment: "packetshaper queue=2-5 proto=tcp family=ipv4",
		matches: []string{"meta nfproto == ipv4", "meta l4proto == tcp", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "icmp is icmpv6 for IPv6", args: []string{"--queue", "1", "--family", "ipv6", "--proto", "icmp"},
		chain:   "input",
		rule:    `meta nfproto ipv6 meta l4proto ipv6-icmp ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=1 proto=icmpv6 family=ipv6"`,
		comment: "packetshaper queue=1 proto=icmpv6 family=ipv6",
		matches: []string{"meta l4proto == ipv6-icmp", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "IPv6 source selects the family, output, range", args: []string{"--queue", "0-1", "--src", "fd00:213::/64", "--chain", "OUTPUT"},
		chain:   "output",
		rule:    `meta nfproto ipv6 ip6 saddr fd00:213::/64 ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=0-1 src=fd00:213::/64 family=ipv6"`,
		comment: "packetshaper queue=0-1 src=fd00:213::/64 family=ipv6",
		matches: []string{"ip6 saddr == fd00:213::/64", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "icmp, both families", args: []string{"--queue", "3", "--proto", "icmp"},
		chain:   "input",
		rule:    `meta l4proto { icmp, ipv6-icmp } ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=3 proto=icmp family=both"`,
		comment: "packetshaper queue=3 proto=icmp family=both",
		matches: []string{"meta l4proto == { icmp, ipv6-icmp }", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "IPv4 source, sctp dport", args: []string{"--queue", "7", "--src", "10.213.0.0/24", "--proto", "sctp", "--dport", "2905"},
		chain:   "input",
		rule:    `meta nfproto ipv4 ip saddr 10.213.0.0/24 meta l4proto sctp th dport 2905 ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=7 proto=sctp dport=2905 src=10.213.0.0/24 family=ipv4"`,
		comment: "packetshaper queue=7 proto=sctp dport=2905 src=10.213.0.0/24 family=ipv4",
		matches: []string{"ip saddr == 10.213.0.0/24", "sctp dport == 2905", "ct state in invalid,established,related,new,untracked"},
	},
	{
		name: "offload, udp dport, IPv4", args: []string{"--queue", "0", "--proto", "udp", "--dport", "9000", "--family", "ipv4", "--offload"},
		chain:   "input",
		rule:    `meta nfproto ipv4 meta l4proto udp th dport 9000 ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=0 proto=udp dport=9000 family=ipv4"`,
		comment: "packetshaper queue=0 proto=udp dport=9000 family=ipv4",
		offload: offloadSets + `add chain inet packetshaper_offload input { type filter hook input priority -20; policy accept; }
add rule inet packetshaper_offload input meta nfproto ipv4 meta l4proto udp th dport 9000 ip saddr . ip daddr . meta l4proto . th sport . th dport @ports4 add @ports4 { ip saddr . ip daddr . meta l4proto . th sport . th dport limit rate over 4000000000/second } counter drop comment "packetshaper queue=0 proto=udp dport=9000 family=ipv4 backend=nft"
`,
		matches: []string{"meta nfproto == ipv4", "udp dport == 9000", "ct state in invalid,established,related,new,untracked"},
		drops: map[string][]string{
			"ports4": {"udp dport == 9000", "ip saddr . ip daddr . meta l4proto . udp sport . udp dport == @ports4"},
		},
	},
	{
		name: "offload, every protocol, both families, queue range, forward", args: []string{"--queue", "4-7", "--chain", "FORWARD", "--offload"},
		chain:   "forward",
		rule:    `ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=4-7 family=both"`,
		comment: "packetshaper queue=4-7 family=both",
		offload: offloadSets + `add chain inet packetshaper_offload forward { type filter hook forward priority -20; policy accept; }
add rule inet packetshaper_offload forward meta nfproto ipv4 meta l4proto { tcp, udp, udplite, sctp } ip saddr . ip daddr . meta l4proto . th sport . th dport @ports4 add @ports4 { ip saddr . ip daddr . meta l4proto . th sport . th dport limit rate over 4000000000/second } counter drop comment "packetshaper queue=4-7 family=both backend=nft"
add rule inet packetshaper_offload forward meta nfproto ipv4 ip saddr . ip daddr . meta l4proto @noports4 add @noports4 { ip saddr . ip daddr . meta l4proto limit rate over 4000000000/second } counter drop comment "packetshaper queue=4-7 family=both backend=nft"
add rule inet packetshaper_offload forward meta nfproto ipv6 meta l4proto { tcp, udp, udplite, sctp } ip6 saddr . ip6 daddr . meta l4proto . th sport . th dport @ports6 add @ports6 { ip6 saddr . ip6 daddr . meta l4proto . th sport . th dport limit rate over 4000000000/second } counter drop comment "packetshaper queue=4-7 family=both backend=nft"
add rule inet packetshaper_offload forward meta nfproto ipv6 ip6 saddr . ip6 daddr . meta l4proto @noports6 add @noports6 { ip6 saddr . ip6 daddr . meta l4proto limit rate over 4000000000/second } counter drop comment "packetshaper queue=4-7 family=both backend=nft"
`,
		matches: []string{"ct state in invalid,established,related,new,untracked"},
		drops: map[string][]string{
			"ports4":   {"meta l4proto == { tcp, udp, sctp, udplite }", "ip saddr . ip daddr . meta l4proto . th sport . th dport == @ports4"},
			"noports4": {"ip saddr . ip daddr . meta l4proto == @noports4"},
			"ports6":   {"meta l4proto == { tcp, udp, sctp, udplite }", "ip6 saddr . ip6 daddr . meta l4proto . th sport . th dport == @ports6"},
			"noports6": {"ip6 saddr . ip6 daddr . meta l4proto == @noports6"},
		},
	},
	{
		name: "offload, gre from an IPv4 prefix, queue range", args: []string{"--queue", "0-1", "--src", "10.0.0.0/8", "--proto", "gre", "--offload"},
		chain:   "input",
		rule:    `meta nfproto ipv4 ip saddr 10.0.0.0/8 meta l4proto gre ct state invalid,new,established,related,untracked counter VERDICT comment "packetshaper queue=0-1 proto=gre src=10.0.0.0/8 family=ipv4"`,
		comment: "packetshaper queue=0-1 proto=gre src=10.0.0.0/8 family=ipv4",
		offload: offloadSets + `add chain inet packetshaper_offload input { type filter hook input priority -20; policy accept; }
add rule inet packetshaper_offload input meta nfproto ipv4 ip saddr 10.0.0.0/8 meta l4proto gre ip saddr . ip daddr . meta l4proto @noports4 add @noports4 { ip saddr . ip daddr . meta l4proto limit rate over 4000000000/second } counter drop comment "packetshaper queue=0-1 proto=gre src=10.0.0.0/8 family=ipv4 backend=nft"
`,
		matches: []string{"ip saddr == 10.0.0.0/8", "meta l4proto == gre", "ct state in invalid,established,related,new,untracked"},
		drops: map[string][]string{
			"noports4": {"ip saddr == 10.0.0.0/8", "meta l4proto == gre", "ip saddr . ip daddr . meta l4proto == @noports4"},
		},
	},
}

// queueStmt is the queue statement rules.sh writes for the case's --queue.
func (c nftCase) queueStmt() string {
	return "queue flags bypass to " + c.args[1]
}

// dryRun is what rules.sh add --backend nft --dry-run must print for c,
// with prefix before each command and verdict in the queue rule.
func (c nftCase) dryRun(prefix, verdict string) string {
	var b strings.Builder
	if c.offload != "" {
		fmt.Fprintf(&b, "%snft -f - <<'EOF'\n%sEOF\n", prefix, c.offload)
	}
	fmt.Fprintf(&b, "%snft -f - <<'EOF'\n", prefix)
	b.WriteString("add table inet packetshaper\n")
	fmt.Fprintf(&b, "add chain inet packetshaper %s { type filter hook %s priority -10; policy accept; }\n", c.chain, c.chain)
	fmt.Fprintf(&b, "add rule inet packetshaper %s %s\n", c.chain, strings.Replace(c.rule, "VERDICT", verdict, 1))
	b.WriteString("EOF\n")
	return b.String()
}

// rulesPath is scripts/rules.sh (TestMain sets rulesScript only as root).
func rulesPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "scripts", "rules.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runRules runs rules.sh with args, inside ns if ns is not "" (through ip
// netns exec, not --netns), with the environment env added, and returns its
// stdout and stderr apart.
func runRules(t *testing.T, ns string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	argv := append([]string{"bash", rulesPath(t)}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// mustRules is runRules that fails the test on error.
func mustRules(t *testing.T, ns string, env []string, args ...string) string {
	t.Helper()
	out, errOut, err := runRules(t, ns, env, args...)
	if err != nil {
		t.Fatalf("rules.sh %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, indent(out), indent(errOut))
	}
	return out
}

// newNetns creates an empty network namespace (lo up) named like newTopo's,
// so that a later run removes it if this one dies before its cleanup.
func newNetns(t *testing.T) string {
	t.Helper()
	var rb [3]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s%d-%s-n", nsPrefix, os.Getpid(), hex.EncodeToString(rb[:]))
	testutil.NewNetns(t, ns)
	return ns
}

// rootNetns is a new empty namespace (newNetns) as root; as another user
// "", the host's (where the script's read-only queries see nothing).
func rootNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return ""
	}
	return newNetns(t)
}

// TestRulesNftDryRun checks the exact output of rules.sh --backend nft
// --dry-run: add for every nftCase (as root inside an empty namespace of
// its own, so that the host's rules cannot make a rule "present"; as
// another user the script's read-only queries see nothing), add with
// --netns (each command prefixed), add under RULES_SH_TEST_VERDICT, and del,
// del --all and list with nothing to remove or show.
func TestRulesNftDryRun(t *testing.T) {
	parallel(t)
	ns := rootNetns(t)
	for _, c := range nftCases {
		args := append([]string{"add", "--backend", "nft", "--dry-run"}, c.args...)
		out, errOut, err := runRules(t, ns, nil, args...)
		if err != nil || errOut != "" {
			t.Errorf("%s: rules.sh %s: %v\nstderr:\n%s", c.name, strings.Join(args, " "), err, indent(errOut))
			continue
		}
		if want := c.dryRun("", c.queueStmt()); out != want {
			t.Errorf("%s: rules.sh %s printed\n%s\nwant\n%s", c.name, strings.Join(args, " "), indent(out), indent(want))
		}
	}
	c := nftCases[0]
	if ns != "" {
		args := append([]string{"add", "--backend", "nft", "--dry-run", "--netns", ns}, c.args...)
		out := mustRules(t, "", nil, args...)
		if want := c.dryRun("ip netns exec "+ns+" ", c.queueStmt()); out != want {
			t.Errorf("rules.sh %s printed\n%s\nwant\n%s", strings.Join(args, " "), indent(out), indent(want))
		}
	}
	// The test verdict: in the rule instead of the queue statement, said on
	// stderr; refused for anything but accept and continue, and for the
	// iptables backend.
	args := append([]string{"add", "--backend", "nft", "--dry-run"}, c.args...)
	out, errOut, err := runRules(t, ns, []string{"RULES_SH_TEST_VERDICT=accept"}, args...)
	if want := c.dryRun("", "accept"); err != nil || out != want || !strings.Contains(errOut, "instead of queueing (tests only)") {
		t.Errorf("RULES_SH_TEST_VERDICT=accept rules.sh %s: %v; printed\n%s\nstderr\n%s\nwant\n%s\nand a warning on stderr",
			strings.Join(args, " "), err, indent(out), indent(errOut), indent(want))
	}
	for _, bad := range []struct {
		verdict string
		args    []string
	}{
		{"drop", args},
		{"queue", args},
		{"accept", append([]string{"add", "--dry-run"}, c.args...)},
	} {
		out, errOut, err := runRules(t, ns, []string{"RULES_SH_TEST_VERDICT=" + bad.verdict}, bad.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || out != "" || !strings.Contains(errOut, "RULES_SH_TEST_VERDICT") {
			t.Errorf("RULES_SH_TEST_VERDICT=%s rules.sh %s: %v, stdout %q, stderr %q; want exit 2, nothing on stdout, a message naming RULES_SH_TEST_VERDICT",
				bad.verdict, strings.Join(bad.args, " "), err, out, errOut)
		}
	}
	// Nothing added: del, del --all and list have nothing to print.
	for _, args := range [][]string{
		append([]string{"del", "--backend", "nft", "--dry-run"}, c.args...),
		append([]string{"del", "--backend", "nft", "--dry-run", "--offload"}, nftCases[6].args[:len(nftCases[6].args)-1]...),
		{"del", "--all", "--dry-run"},
		{"list", "--backend", "nft"},
	} {
		if ns == "" && args[0] == "list" {
			continue // list is not a dry run: it needs root
		}
		out, errOut, err := runRules(t, ns, nil, args...)
		if err != nil || out != "" {
			t.Errorf("rules.sh %s with no rules: %v, printed %q (stderr %q); want nothing", strings.Join(args, " "), err, out, errOut)
		}
	}
}

// needNft is needRoot plus nft: CI has it (scripts/test.sh installs
// nftables), so a missing nft is a failure there, not a skip.
func needNft(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: needs root to create a network namespace and load nft rules into it; run `sudo go test ./e2e/` (CI runs as root)")
	}
	for _, tool := range []string{"ip", "nft", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e: %s not found in PATH (apt-get install iproute2 nftables iptables)", tool)
		}
	}
}

// nftRuleset is the part of `nft -j list ruleset` the tests look at.
type nftRuleset struct {
	Tables []string            // "inet packetshaper"
	Chains map[string]nftChain // by "table chain"
	Sets   map[string]nftSet   // by "table set"
	Rules  []nftRule           // in listing order
}

type nftChain struct {
	Type, Hook, Policy string
	Prio               int
}

type nftSet struct {
	Type    []string
	Flags   []string
	Size    int
	Timeout int // seconds
}

type nftRule struct {
	Table, Chain, Comment string
	Handle                int
	// Matches are the rule's match expressions (nftExprString); Stmts its
	// other statements in order: "counter", "accept", "drop", "queue
	// num=N-M flags=bypass".
	Matches, Stmts []string
}

// listRuleset reads and parses `nft -j list ruleset` in ns.
func listRuleset(t *testing.T, ns string) nftRuleset {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset").Output()
	if err != nil {
		t.Fatalf("[%s] nft -j list ruleset: %v", ns, err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v\n%s", err, out)
	}
	rs := nftRuleset{Chains: map[string]nftChain{}, Sets: map[string]nftSet{}}
	for _, obj := range doc.Nftables {
		for kind, raw := range obj {
			var v struct {
				Family, Table, Name, Chain, Comment string
				Type                                any
				Hook, Policy                        string
				Prio, Handle, Size, Timeout         int
				Flags                               []string
				Expr                                []map[string]any
			}
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("nft -j: %s: %v\n%s", kind, err, raw)
			}
			switch kind {
			case "table":
				rs.Tables = append(rs.Tables, v.Family+" "+v.Name)
			case "chain":
				typ, _ := v.Type.(string)
				rs.Chains[v.Table+" "+v.Name] = nftChain{Type: typ, Hook: v.Hook, Policy: v.Policy, Prio: v.Prio}
			case "set":
				var typ []string
				switch tv := v.Type.(type) {
				case string:
					typ = []string{tv}
				case []any:
					for _, e := range tv {
						typ = append(typ, fmt.Sprint(e))
					}
				}
				rs.Sets[v.Table+" "+v.Name] = nftSet{Type: typ, Flags: v.Flags, Size: v.Size, Timeout: v.Timeout}
			case "rule":
				r := nftRule{Table: v.Table, Chain: v.Chain, Comment: v.Comment, Handle: v.Handle}
				for _, e := range v.Expr {
					for k, ev := range e {
						switch k {
						case "match":
							m, _ := ev.(map[string]any)
							r.Matches = append(r.Matches, fmt.Sprintf("%s %s %s", nftExprString(m["left"]), m["op"], nftExprString(m["right"])))
						case "queue":
							q, _ := ev.(map[string]any)
							r.Stmts = append(r.Stmts, fmt.Sprintf("queue num=%s flags=%s", nftExprString(q["num"]), nftExprString(q["flags"])))
						case "set": // the offload rules' "add @set { elem limit ... }"
							d, _ := ev.(map[string]any)
							st := fmt.Sprintf("%s %s { %s", d["op"], d["set"], nftExprString(d["elem"]))
							ss, _ := d["stmt"].([]any)
							for _, x := range ss {
								if l, ok := x.(map[string]any)["limit"].(map[string]any); ok {
									over := ""
									if l["inv"] == true {
										over = "over "
									}
									st += fmt.Sprintf(" limit rate %s%.0f/%s burst %.0f", over, l["rate"], l["per"], l["burst"])
								} else {
									b, _ := json.Marshal(x)
									st += " " + string(b)
								}
							}
							r.Stmts = append(r.Stmts, st+" }")
						default:
							r.Stmts = append(r.Stmts, k)
						}
					}
				}
				rs.Rules = append(rs.Rules, r)
			}
		}
	}
	return rs
}

// nftExprString writes an expression of nft's JSON the way nft's text
// syntax does: "udp dport", "meta l4proto", "{ icmp, ipv6-icmp }",
// "10.0.0.0/8", "ip saddr . ip daddr", "0-1".
func nftExprString(v any) string {
	switch e := v.(type) {
	case nil:
		return ""
	case string:
		return e
	case float64:
		return fmt.Sprint(e)
	case []any:
		s := make([]string, len(e))
		for i, x := range e {
			s[i] = nftExprString(x)
		}
		return strings.Join(s, ",")
	case map[string]any:
		if p, ok := e["payload"].(map[string]any); ok {
			return fmt.Sprintf("%s %s", p["protocol"], p["field"])
		}
		if m, ok := e["meta"].(map[string]any); ok {
			return fmt.Sprintf("meta %s", m["key"])
		}
		if c, ok := e["ct"].(map[string]any); ok {
			return fmt.Sprintf("ct %s", c["key"])
		}
		if p, ok := e["prefix"].(map[string]any); ok {
			return fmt.Sprintf("%s/%s", nftExprString(p["addr"]), nftExprString(p["len"]))
		}
		if r, ok := e["range"].([]any); ok && len(r) == 2 {
			return nftExprString(r[0]) + "-" + nftExprString(r[1])
		}
		if s, ok := e["set"].([]any); ok {
			el := make([]string, len(s))
			for i, x := range s {
				el[i] = nftExprString(x)
			}
			return "{ " + strings.Join(el, ", ") + " }"
		}
		if c, ok := e["concat"].([]any); ok {
			el := make([]string, len(c))
			for i, x := range c {
				el[i] = nftExprString(x)
			}
			return strings.Join(el, " . ")
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// byComment returns the rules of table whose comment is c.
func (rs nftRuleset) byComment(table, c string) []nftRule {
	var out []nftRule
	for _, r := range rs.Rules {
		if r.Table == table && r.Comment == c {
			out = append(out, r)
		}
	}
	return out
}

// withoutHandles is rs with every rule's handle 0, to compare rulesets
// built in different orders of commands.
func (rs nftRuleset) withoutHandles() nftRuleset {
	c := rs
	c.Rules = append([]nftRule(nil), rs.Rules...)
	for i := range c.Rules {
		c.Rules[i].Handle = 0
	}
	sort.Strings(c.Tables)
	return c
}

// TestRulesNftApply applies, in a namespace of its own, what rules.sh add
// --backend nft --dry-run prints for every nftCase, then the same through
// rules.sh add itself, and checks both give the same ruleset: the tables,
// the chains (hook, priority -10 for the queue rules, -20 for the offload
// drop rules, policy accept), the offload sets (types, timeout, size) and
// one rule per case with its tag, its matches, a counter and the queue
// statement with bypass (or, on a kernel without nft_queue, the accept that
// RULES_SH_TEST_VERDICT swaps in). add again changes nothing; list shows
// every rule; del --dry-run prints the deletes by handle and changes
// nothing; del removes each case's rules (and its drop rules, without
// --offload) and leaves the others, and the last del removes both tables.
func TestRulesNftApply(t *testing.T) {
	parallel(t)
	needNft(t)
	ns := newNetns(t)
	// The real queue statement if this kernel takes it; otherwise, the
	// swap, after checking that the refusal leaves nothing behind.
	var env []string
	verdict := func(c nftCase) string { return c.queueStmt() }
	// nft -j lists the queue as "num": N or "num": {"range": [N, M]}.
	wantStmts := func(c nftCase) []string { return []string{"counter", "queue num=" + c.args[1] + " flags=bypass"} }
	out, errOut, err := runRules(t, "", nil, append([]string{"add", "--backend", "nft", "--netns", ns}, nftCases[0].args...)...)
	switch {
	case err != nil && strings.Contains(errOut, "CONFIG_NFT_QUEUE"):
		t.Logf("this kernel has no nft queue support: rules.sh add with RULES_SH_TEST_VERDICT=accept (%s)", lastLine(errOut))
		if rs := listRuleset(t, ns); len(rs.Tables) != 0 {
			t.Fatalf("the refused nft add left tables behind: %v", rs.Tables)
		}
		env = []string{"RULES_SH_TEST_VERDICT=accept"}
		verdict = func(nftCase) string { return "accept" }
		wantStmts = func(nftCase) []string { return []string{"counter", "accept"} }
	case err != nil:
		t.Fatalf("rules.sh add --backend nft: %v\n%s%s", err, out, errOut)
	default:
		t.Logf("this kernel takes nft queue rules: testing the real queue statement")
		mustRules(t, "", nil, "del", "--all", "--netns", ns)
	}

	// 1. What --dry-run prints, run by a shell.
	for _, c := range nftCases {
		script := mustRules(t, "", env, append([]string{"add", "--backend", "nft", "--dry-run", "--netns", ns}, c.args...)...)
		if want := c.dryRun("ip netns exec "+ns+" ", verdict(c)); script != want {
			t.Fatalf("%s: --dry-run printed\n%s\nwant\n%s", c.name, indent(script), indent(want))
		}
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		out, err := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: the --dry-run output, run by bash: %v\n%s\nscript:\n%s", c.name, err, indent(string(out)), indent(script))
		}
	}
	fromDryRun := listRuleset(t, ns)
	checkNftRuleset(t, fromDryRun, wantStmts)

	// 2. rules.sh add itself: the same ruleset.
	mustRules(t, "", nil, "del", "--all", "--netns", ns)
	if rs := listRuleset(t, ns); len(rs.Tables) != 0 {
		t.Fatalf("del --all left tables behind: %v", rs.Tables)
	}
	for _, c := range nftCases {
		out := mustRules(t, "", env, append([]string{"add", "--backend", "nft", "--netns", ns}, c.args...)...)
		if !strings.Contains(out, "rules.sh: added: nft add rule inet packetshaper "+c.chain+" ") {
			t.Errorf("%s: add does not say what it added:\n%s", c.name, indent(out))
		}
	}
	added := listRuleset(t, ns)
	if a, d := added.withoutHandles(), fromDryRun.withoutHandles(); !reflect.DeepEqual(a, d) {
		t.Errorf("rules.sh add and its --dry-run output, run by bash, give different rulesets:\nadd:     %+v\ndry-run: %+v", a, d)
	}
	// Twice is once.
	for _, c := range nftCases {
		out := mustRules(t, "", env, append([]string{"add", "--backend", "nft", "--netns", ns}, c.args...)...)
		if strings.Contains(out, "added:") || !strings.Contains(out, "rules.sh: present: nft add rule inet packetshaper "+c.chain+" ") {
			t.Errorf("%s: the second add does not say the rule is present, or adds one:\n%s", c.name, indent(out))
		}
	}
	if again := listRuleset(t, ns); !reflect.DeepEqual(again, added) {
		t.Errorf("a second add changed the ruleset:\nbefore: %+v\nafter:  %+v", added, again)
	}

	// list: one line per rule, queue rules then drop rules, each "nft ...".
	list := strings.Split(strings.TrimRight(mustRules(t, "", nil, "list", "--backend", "nft", "--netns", ns), "\n"), "\n")
	if len(list) != len(added.Rules) {
		t.Errorf("list printed %d lines for %d rules:\n%s", len(list), len(added.Rules), indent(strings.Join(list, "\n")))
	}
	for i, l := range list {
		if i < len(added.Rules) && (!strings.HasPrefix(l, "nft ") || !strings.HasSuffix(l, fmt.Sprintf(" comment %q", added.Rules[i].Comment))) {
			t.Errorf("list line %d: %q; want \"nft ...\" ending with the comment of rule %+v", i, l, added.Rules[i])
		}
	}

	// del --dry-run: the deletes by handle, nothing deleted.
	c := nftCases[7] // with drop rules on every set
	var want []string
	for _, r := range added.byComment("packetshaper", c.comment) {
		want = append(want, fmt.Sprintf("ip netns exec %s nft delete rule inet packetshaper %s handle %d", ns, r.Chain, r.Handle))
	}
	for _, set := range []string{"ports4", "ports6", "noports4", "noports6"} {
		for _, r := range added.byComment("packetshaper_offload", c.comment+" backend=nft") {
			if len(r.Matches) > 0 && strings.HasSuffix(r.Matches[len(r.Matches)-1], "@"+set) {
				want = append(want, fmt.Sprintf("ip netns exec %s nft delete rule inet packetshaper_offload %s handle %d", ns, r.Chain, r.Handle))
			}
		}
	}
	if got := mustRules(t, "", nil, append([]string{"del", "--backend", "nft", "--dry-run", "--netns", ns}, c.args...)...); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("del --dry-run %s printed\n%s\nwant\n%s", strings.Join(c.args, " "), indent(got), indent(strings.Join(want, "\n")))
	}
	wantAll := fmt.Sprintf("ip netns exec %[1]s nft delete table inet packetshaper\nip netns exec %[1]s nft delete table inet packetshaper_offload\n", ns)
	if got := mustRules(t, "", nil, "del", "--all", "--dry-run", "--netns", ns); got != wantAll {
		t.Errorf("del --all --dry-run printed\n%s\nwant\n%s", indent(got), indent(wantAll))
	}
	if after := listRuleset(t, ns); !reflect.DeepEqual(after, added) {
		t.Errorf("del --dry-run changed the ruleset")
	}

	// del, case by case (without --offload: the drop rules go all the same).
	left := added
	for i, c := range nftCases {
		args := []string{}
		for _, a := range c.args {
			if a != "--offload" {
				args = append(args, a)
			}
		}
		mustRules(t, "", env, append([]string{"del", "--backend", "nft", "--netns", ns}, args...)...)
		rs := listRuleset(t, ns)
		if r := rs.byComment("packetshaper", c.comment); len(r) != 0 {
			t.Errorf("%s: del left its rule: %+v", c.name, r)
		}
		if r := rs.byComment("packetshaper_offload", c.comment+" backend=nft"); len(r) != 0 {
			t.Errorf("%s: del left its drop rules: %+v", c.name, r)
		}
		// Every other rule stays, as it was.
		var keep []nftRule
		for _, r := range left.Rules {
			if r.Comment != c.comment && r.Comment != c.comment+" backend=nft" {
				keep = append(keep, r)
			}
		}
		if !reflect.DeepEqual(rs.Rules, keep) {
			t.Errorf("%s: after its del the rules are\n%+v\nwant\n%+v", c.name, rs.Rules, keep)
		}
		if i < len(nftCases)-1 && len(rs.Tables) == 0 {
			t.Errorf("%s: del removed the tables with rules left to remove", c.name)
		}
		left = rs
	}
	if rs := listRuleset(t, ns); len(rs.Tables) != 0 || len(rs.Rules) != 0 {
		t.Errorf("after the last del: tables %v, rules %+v; want none", rs.Tables, rs.Rules)
	}
}

// checkNftRuleset checks that rs holds exactly the tables, chains, sets and
// rules of nftCases, the queue rules with statements wantStmts.
func checkNftRuleset(t *testing.T, rs nftRuleset, wantStmts func(nftCase) []string) {
	t.Helper()
	got := append([]string(nil), rs.Tables...)
	sort.Strings(got)
	if !reflect.DeepEqual(got, []string{"inet packetshaper", "inet packetshaper_offload"}) {
		t.Errorf("tables %v, want inet packetshaper and inet packetshaper_offload", rs.Tables)
	}
	wantChains := map[string]nftChain{
		"packetshaper input":           {Type: "filter", Hook: "input", Policy: "accept", Prio: -10},
		"packetshaper forward":         {Type: "filter", Hook: "forward", Policy: "accept", Prio: -10},
		"packetshaper output":          {Type: "filter", Hook: "output", Policy: "accept", Prio: -10},
		"packetshaper_offload input":   {Type: "filter", Hook: "input", Policy: "accept", Prio: -20},
		"packetshaper_offload forward": {Type: "filter", Hook: "forward", Policy: "accept", Prio: -20},
	}
	if !reflect.DeepEqual(rs.Chains, wantChains) {
		t.Errorf("chains\n%+v\nwant\n%+v", rs.Chains, wantChains)
	}
	v4, v6 := "ipv4_addr", "ipv6_addr"
	wantSets := map[string]nftSet{
		"packetshaper_offload ports4":   {Type: []string{v4, v4, "inet_proto", "inet_service", "inet_service"}, Flags: []string{"timeout"}, Size: 65536, Timeout: 10},
		"packetshaper_offload noports4": {Type: []string{v4, v4, "inet_proto"}, Flags: []string{"timeout"}, Size: 65536, Timeout: 10},
		"packetshaper_offload ports6":   {Type: []string{v6, v6, "inet_proto", "inet_service", "inet_service"}, Flags: []string{"timeout"}, Size: 65536, Timeout: 10},
		"packetshaper_offload noports6": {Type: []string{v6, v6, "inet_proto"}, Flags: []string{"timeout"}, Size: 65536, Timeout: 10},
	}
	if !reflect.DeepEqual(rs.Sets, wantSets) {
		t.Errorf("sets\n%+v\nwant\n%+v", rs.Sets, wantSets)
	}
	n := 0
	for _, c := range nftCases {
		r := rs.byComment("packetshaper", c.comment)
		if len(r) != 1 {
			t.Errorf("%s: %d rules tagged %q in table inet packetshaper, want 1: %+v", c.name, len(r), c.comment, r)
			continue
		}
		n++
		if r[0].Chain != c.chain || !reflect.DeepEqual(r[0].Matches, c.matches) || !reflect.DeepEqual(r[0].Stmts, wantStmts(c)) {
			t.Errorf("%s: rule %+v; want chain %s, matches %q, statements %q", c.name, r[0], c.chain, c.matches, wantStmts(c))
		}
		drops := rs.byComment("packetshaper_offload", c.comment+" backend=nft")
		n += len(drops)
		if len(drops) != len(c.drops) {
			t.Errorf("%s: %d drop rules, want %d: %+v", c.name, len(drops), len(c.drops), drops)
		}
		for _, d := range drops {
			var set string
			if len(d.Matches) > 0 {
				set = d.Matches[len(d.Matches)-1]
				set = set[strings.LastIndex(set, "@")+1:]
			}
			// The add runs the element's limit; its own (for an element
			// it would create) limits nothing.
			var add string
			if len(d.Matches) > 0 {
				tuple, _, _ := strings.Cut(d.Matches[len(d.Matches)-1], " == @")
				add = "add @" + set + " { " + tuple + " limit rate over 4000000000/second burst 5 }"
			}
			if want, ok := c.drops[set]; !ok || d.Chain != c.chain || !reflect.DeepEqual(d.Matches, want) || !reflect.DeepEqual(d.Stmts, []string{add, "counter", "drop"}) {
				t.Errorf("%s: drop rule %+v; want chain %s, matches %q, statements %q, counter, drop", c.name, d, c.chain, want, add)
			}
		}
	}
	if n != len(rs.Rules) {
		t.Errorf("%d rules in all, want %d (the cases' rules and nothing else):\n%+v", len(rs.Rules), n, rs.Rules)
	}
}
