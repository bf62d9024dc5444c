#!/usr/bin/env bash
# rules.sh - add or remove the firewall rules that divert packets to
# packetshaper's NFQUEUE queue(s), with iptables or nftables.
#
# Usage
#   rules.sh add  [options]     add the rule (idempotent: twice = one rule)
#   rules.sh del  [options]     delete that rule (absent = ok)
#   rules.sh del  --all         delete every rule this script added
#   rules.sh list [--backend B] [--netns NS]   show our rules
#
# Options (same for add and del; del must repeat the options of add)
#   --backend iptables|nft    default: iptables if the iptables command is
#                             installed, else nft (an nftables-only host)
#                             (iptables/ip6tables; with the nf_tables
#                             iptables they still become nft rules, but in
#                             the "ip filter"/"ip6 filter" tables)
#   --queue N | N-M           queue number, or a range balanced by flow hash
#                             (iptables --queue-balance N:M, nft "num N-M")
#   --chain INPUT|OUTPUT|FORWARD   default INPUT
#   --proto P                 udp, tcp, icmp, sctp, ... (icmp is icmpv6 for IPv6)
#   --dport PORT | LO-HI      destination port or range; needs --proto
#                             udp|tcp|sctp|udplite
#   --sport PORT | LO-HI      source port or range (replies from a server
#                             port, say); needs --proto udp|tcp|sctp|udplite
#   --src ADDR[/LEN]          source address or prefix; its family selects
#                             IPv4 or IPv6 when --family is both
#   --family ipv4|ipv6|both   default both
#   --syn                     TCP SYNs only (SYN set, ACK, RST and FIN clear:
#                             iptables --syn); needs --proto tcp
#   --icmp-type N             one ICMP type (0-255; with --proto icmpv6 an
#                             ICMPv6 type); needs --proto icmp or icmpv6 and,
#                             with icmp, --family ipv4
#   --ctstate LIST            only these connection states (NEW, ESTABLISHED,
#                             RELATED, INVALID, UNTRACKED, comma-separated)
#                             instead of every state (below): a host limiting
#                             new connections queues their first packets only
#   --netns NAME              run the commands inside network namespace NAME
#   --dry-run                 print the commands, change nothing
#   --notrack-forwarded       add (--chain INPUT or OUTPUT; needs nft): also
#                             untrack, before defragmentation, what is not
#                             for this host (below); del --all (or del
#                             --notrack-forwarded) removes it
#   --offload                 add: also the kernel drop rules of packetshaper
#                             --offload (below); del removes them with or
#                             without it
#   --fastpath                instead of --proto/--dport/--sport/--src/--chain:
#                             the rule of packetshaper --fastpath IFACE, which
#                             queues exactly the packets its eBPF program
#                             marked for user space (the punt mark), in the
#                             mangle table's PREROUTING chain (iptables only):
#                             iptables -t mangle -I PREROUTING -m mark --mark
#                             0x40000000/0x40000000 ... -j NFQUEUE ... --queue-bypass.
#                             Add no other queue rule for that traffic: the
#                             packets the program decided must not be queued.
#                             Its defragmentation comes without connection
#                             tracking (below); --conntrack keeps the
#                             conntrack match instead
#   --conntrack               with --fastpath: the rule carries the conntrack
#                             match of every state (below) rather than the
#                             socket-match rule: for a policy whose rules
#                             match connection states (ct-state), which the
#                             queue then gets; del needs it too
#   --policy FILE             instead of --proto/--dport/--sport/--src/--family:
#                             the rules the rule file's matches need, one
#                             add (or del) each, as `packetshaper divert
#                             --policy FILE --queue N` prints them (the
#                             packetshaper command: $PACKETSHAPER, default
#                             packetshaper in PATH). After a change of the
#                             file: del --all, then add --policy FILE again.
#
# Every rule carries the bypass flag (iptables --queue-bypass, nft "bypass"):
# when no packetshaper is bound to the queue, packets are accepted instead of
# dropped, so stopping or killing packetshaper never cuts the network.
# Every rule also carries a conntrack match that every packet passes
# (iptables -m conntrack --ctstate INVALID,NEW,ESTABLISHED,RELATED,UNTRACKED,
# nft "ct state invalid,new,established,related,untracked"): while such a
# rule exists, the kernel has connection tracking, and with it defragmentation
# (nf_defrag_ipv4/ipv6, hooked at priority -400, before any filter chain), on
# in the namespace, so fragments are reassembled before the queue hook and
# packetshaper sees, and charges, each datagram whole, in INPUT, FORWARD and
# OUTPUT. Without it, a port match (--dport) cannot match the fragments after
# the first (they carry no ports) and they would pass uncharged. The cost:
# conntrack tracks all traffic of the namespace (net.netfilter.nf_conntrack_max
# bounds its table; a full table drops new connections). --ctstate narrows
# that match to the states given (the tracking, and defragmentation, stay
# on): `packetshaper divert --policy` gives it when every rule that needs
# packets has a ct-state match, so established traffic never reaches the
# queue.
#
# --fastpath: the packets the program decided never reach the queue, so
# its rule tracks no connections (which costs every packet of the namespace:
# the fast path decided 0.85-0.90x the packets/s of no rule with it, see
# docs/fastpath.md); defragmentation, which the punted fragments need, is
# kept on by a second rule, "-m mark --mark PUNT/PUNT -m socket" with the
# comment "packetshaper fastpath-defrag", appended to mangle PREROUTING
# (punted packets are queued before it; the others fail its mark test, so
# the socket match never runs): the socket match turns on nf_defrag_ipv4/
# ipv6 in the namespace without conntrack. It goes with the last fastpath
# rule of its family (or del --all). --conntrack: the old rule (conntrack
# match of every state, no second rule), for policies with ct-state matches.
# del --fastpath also removes the rule of before (the conntrack match under
# the comment without "conntrack").
#
# --notrack-forwarded: that defragmentation is the namespace's, so forwarded
# datagrams are reassembled too, which a router without conntrack rules of
# its own does not do: a flood of fragments that never complete fills the
# reassembly memory (net.ipv4.ipfrag_high_thresh, 4 MiB) and the forwarded
# fragmented datagrams, which no INPUT or OUTPUT rule diverts, are lost (18
# of 600 arrived, 600 of 600 without the rule: e2e/TestFragmentFloodForwarded).
# --notrack-forwarded adds table "inet packetshaper_notrack", a chain on
# prerouting at priority -450 (before defragmentation, -400) and "fib daddr
# type != local notrack": packets not for this host are untracked, so the
# kernel does not reassemble them (nf_defrag skips untracked packets) and
# they are routed as without packetshaper. Not with --chain FORWARD, which
# needs them whole. On a host that uses conntrack itself for forwarded
# traffic (NAT, masquerade, "ct state" rules in FORWARD) do not use it: its
# forwarded traffic would go untracked (no NAT, state "untracked"), and
# there its own rules keep reassembly on anyway, with or without packetshaper.
#
# iptables rules are inserted at the top of the chain and tagged with a
# comment "packetshaper ..." naming the rule; nft rules live in their own
# table "inet packetshaper" (removed when its last rule goes), also tagged;
# they carry a counter.
#
# --offload (either backend; needs nft): in table "inet packetshaper_offload",
# sets of flows that packetshaper pushes when they keep dropping (elements
# with a timeout, at most OFF_TIMEOUT, and a limit of their own, the flow's
# rule's: ports4/ports6 by address . address . protocol . port . port,
# noports4/noports6 by address . address . protocol), a chain on the queue
# rule's hook at priority -20 (before filter chains and the nft backend's -10)
# and, per family, rules "<the queue rule's match> <the packet's tuple> @set
# add @set { <the tuple> limit ... } counter drop": the lookup matches only
# elements packetshaper added, the add runs that element's limit, and only
# the packets over it are dropped (only traffic the queue rule would queue);
# the others go on to the queue. (The add's own "limit rate over
# 4000000000/second", which limits nothing, is for an element the add would
# create if one expired between the lookup and the add.)
# The table goes when its last rule does (del, del --all).
#
# RULES_SH_TEST_VERDICT=accept|continue (tests only; nft backend): that
# verdict instead of the queue statement, for kernels without nft_queue.
#
# Examples
#   sudo scripts/rules.sh add --queue 0 --proto udp --dport 9000
#   sudo scripts/rules.sh add --backend nft --queue 0-1 --chain FORWARD
#   sudo scripts/rules.sh del --queue 0 --proto udp --dport 9000
#   sudo scripts/rules.sh add --queue 0 --proto udp --dport 9000 --offload
#   sudo scripts/rules.sh add --queue 0 --proto udp --dport 9000-9100
#   sudo scripts/rules.sh add --queue 0 --policy /etc/packetshaper/policy.toml
set -u -o pipefail

PROG=rules.sh
die() { echo "$PROG: $*" >&2; exit 2; }
fail() { echo "$PROG: $*" >&2; exit 1; }
usage() { sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }

NFT_TABLE=packetshaper
TAG=packetshaper
# Every conntrack state: the match that keeps defragmentation on (see above)
# and lets every packet through.
IPT_CTSTATE=INVALID,NEW,ESTABLISHED,RELATED,UNTRACKED
NFT_CTSTATE=invalid,new,established,related,untracked
# The fast path's punt mark: fastpath.DefaultPuntMark.
PUNT_MARK=0x40000000
# The offload table and sets: the same names as package offload's constants
# (its tests check that they agree).
OFF_TABLE=packetshaper_offload
# --notrack-forwarded's table.
NOTRACK_TABLE=packetshaper_notrack
OFF_PRIO=-20
OFF_SIZE=65536
# The sets' default timeout: offload.MaxTimeout. No element outlives a
# killed packetshaper longer.
OFF_TIMEOUT=10s
# The add statement's own limit: none (see --offload above).
OFF_NOLIMIT="limit rate over 4000000000/second"

cmd=${1:-}
[ -n "$cmd" ] || { usage >&2; exit 2; }
shift
case "$cmd" in
add | del | list) ;;
-h | --help | help) usage; exit 0 ;;
*) die "unknown command '$cmd' (add|del|list|--help)" ;;
esac

backend="" queue="" chain=INPUT proto="" dport="" sport="" src="" family=both netns="" dry=0 all=0 offload=0 policy="" family_given=0 fastpath=0 syn=0 icmptype="" ctstate="" notrack=0 fpct=0
need() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
	case "$1" in
	--backend) need "$@"; backend=$2; shift 2 ;;
	--queue) need "$@"; queue=$2; shift 2 ;;
	--chain) need "$@"; chain=$2; shift 2 ;;
	--proto) need "$@"; proto=$2; shift 2 ;;
	--dport) need "$@"; dport=$2; shift 2 ;;
	--sport) need "$@"; sport=$2; shift 2 ;;
	--policy) need "$@"; policy=$2; shift 2 ;;
	--src) need "$@"; src=$2; shift 2 ;;
	--family) need "$@"; family=$2; family_given=1; shift 2 ;;
	--syn) syn=1; shift ;;
	--icmp-type) need "$@"; icmptype=$2; shift 2 ;;
	--ctstate) need "$@"; ctstate=$2; shift 2 ;;
	--netns) need "$@"; netns=$2; shift 2 ;;
	--dry-run) dry=1; shift ;;
	--all) all=1; shift ;;
	--offload) offload=1; shift ;;
	--notrack-forwarded) notrack=1; shift ;;
	--fastpath) fastpath=1; shift ;;
	--conntrack) fpct=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
done

# ---------------------------------------------------------------- validate
# No --backend: what is installed, iptables first (it needs no nft_queue in
# the kernel), nft on an nftables-only host; said on stderr when it is nft.
if [ -z "$backend" ]; then
	if ! command -v iptables >/dev/null && command -v nft >/dev/null; then
		backend=nft
		echo "$PROG: no iptables command: --backend nft" >&2
	else
		backend=iptables # (neither: add says what to install)
	fi
fi
case "$backend" in iptables | nft) ;; *) die "--backend '$backend': want iptables or nft" ;; esac
case "$family" in ipv4 | ipv6 | both) ;; *) die "--family '$family': want ipv4, ipv6 or both" ;; esac
chain=$(echo "$chain" | tr '[:lower:]' '[:upper:]')
case "$chain" in INPUT | OUTPUT | FORWARD) ;; *) die "--chain '$chain': want INPUT, OUTPUT or FORWARD" ;; esac
# --fastpath: the mangle table's PREROUTING (tc ingress runs before it).
ipt_table=()
if [ "$fastpath" = 1 ]; then
	[ "$backend" = iptables ] || die "--fastpath: iptables only (--backend iptables)"
	[ -z "$proto$dport$sport$src$policy" ] && [ "$offload" = 0 ] || die "--fastpath takes no --proto/--dport/--sport/--src/--policy/--offload: the eBPF program decides which packets come to the queue"
	chain=PREROUTING ipt_table=(-t mangle)
fi
[ "$fpct" = 0 ] || [ "$fastpath" = 1 ] || die "--conntrack: only with --fastpath (the other rules always carry the conntrack match)"
isnum() { case "$1" in '' | *[!0-9]*) return 1 ;; esac; [ ${#1} -le 5 ] && [ "$1" -le "$2" ]; }
qlo="" qhi=""
if [ "$cmd" != list ] && [ "$all" = 0 ]; then
	[ -n "$queue" ] || die "--queue N or N-M is required"
	case "$queue" in
	*-*) qlo=${queue%-*} qhi=${queue#*-} ;;
	*) qlo=$queue qhi=$queue ;;
	esac
	{ isnum "$qlo" 65535 && isnum "$qhi" 65535; } || die "--queue '$queue': want N or N-M with 0 <= N <= M <= 65535"
	[ "$qlo" -le "$qhi" ] || die "--queue '$queue': N must not exceed M"
fi
proto=$(echo "$proto" | tr '[:upper:]' '[:lower:]')
case "$proto" in
'' | udp | tcp | icmp | icmpv6 | sctp | udplite | esp | ah | gre) ;;
*) die "--proto '$proto': want udp, tcp, icmp, icmpv6, sctp, udplite, esp, ah or gre" ;;
esac
# checkports NAME VALUE: a port 1..65535 or a range LO-HI, 0 <= LO <= HI <= 65535.
checkports() {
	local lo hi
	case "$2" in
	*-*)
		lo=${2%%-*} hi=${2#*-}
		{ isnum "$lo" 65535 && isnum "$hi" 65535 && [ "$lo" -le "$hi" ]; } || die "$1 '$2': want a port 1..65535 or a range LO-HI (0 <= LO <= HI <= 65535)"
		;;
	*) { isnum "$2" 65535 && [ "$2" -ge 1 ]; } || die "$1 '$2': want a port 1..65535 or a range LO-HI" ;;
	esac
	case "$proto" in udp | tcp | sctp | udplite) ;; *) die "$1 needs --proto udp, tcp, sctp or udplite" ;; esac
}
[ -z "$dport" ] || checkports --dport "$dport"
[ -z "$sport" ] || checkports --sport "$sport"
[ "$syn" = 0 ] || [ "$proto" = tcp ] || die "--syn needs --proto tcp"
if [ -n "$icmptype" ]; then
	isnum "$icmptype" 255 || die "--icmp-type '$icmptype': want a number 0-255"
	case "$proto" in
	icmp) [ "$family" = ipv4 ] || die "--icmp-type with --proto icmp needs --family ipv4 (ICMPv6 types differ: --proto icmpv6)" ;;
	icmpv6) ;;
	*) die "--icmp-type needs --proto icmp or icmpv6" ;;
	esac
fi
if [ -n "$ctstate" ]; then
	ctstate=$(echo "$ctstate" | tr '[:lower:]' '[:upper:]')
	for s in ${ctstate//,/ }; do
		case "$s" in NEW | ESTABLISHED | RELATED | INVALID | UNTRACKED) ;; *) die "--ctstate '$ctstate': want NEW, ESTABLISHED, RELATED, INVALID or UNTRACKED, comma-separated" ;; esac
	done
	[ "$fastpath" = 0 ] || die "--ctstate: not with --fastpath"
	IPT_CTSTATE=$ctstate
	NFT_CTSTATE=$(echo "$ctstate" | tr '[:upper:]' '[:lower:]')
fi
# --policy: one add (del) per rule that `packetshaper divert` prints, with the
# options given here; the rules themselves are written below, by the child.
if [ -n "$policy" ] && [ "$cmd" != list ] && [ "$all" = 0 ]; then
	[ -z "$proto$dport$sport$src$icmptype$ctstate" ] && [ "$family_given" = 0 ] && [ "$syn" = 0 ] || die "--policy gives the match: not with --proto, --dport, --sport, --src, --family, --syn, --icmp-type or --ctstate"
	ps=${PACKETSHAPER:-packetshaper}
	command -v "$ps" >/dev/null || fail "--policy: $ps not found (set PACKETSHAPER to the packetshaper command)"
	lines=$("$ps" divert --policy "$policy" --queue "$queue") || fail "--policy $policy: packetshaper divert failed"
	[ -n "$lines" ] || fail "--policy $policy: no divert rules"
	common=(--queue "$queue" --chain "$chain")
	[ -z "$backend" ] || common+=(--backend "$backend")
	[ -z "$netns" ] || common+=(--netns "$netns")
	[ "$dry" = 0 ] || common+=(--dry-run)
	[ "$offload" = 0 ] || common+=(--offload)
	[ "$notrack" = 0 ] || common+=(--notrack-forwarded)
	rc=0
	while read -r -a opts; do
		[ ${#opts[@]} -gt 0 ] || continue
		"$0" "$cmd" "${common[@]}" "${opts[@]}" </dev/null || rc=$?
	done <<<"$lines"
	exit "$rc"
fi
src_family=""
if [ -n "$src" ]; then
	case "$src" in
	*:*) src_family=ipv6 ;;
	*.*) src_family=ipv4 ;;
	*) die "--src '$src': want an IPv4 or IPv6 address or prefix" ;;
	esac
	echo "$src" | grep -Eq '^[0-9A-Fa-f.:]+(/[0-9]{1,3})?$' || die "--src '$src': want an address or ADDR/LEN"
	[ "$family" = both ] || [ "$family" = "$src_family" ] || die "--src '$src' is $src_family but --family is $family"
	family=$src_family
fi
case "$proto" in
icmp) [ "$family" != ipv6 ] || proto=icmpv6 ;;
icmpv6) [ "$family" != ipv4 ] || die "--proto icmpv6 with --family ipv4" ; family=ipv6 ;;
esac
if [ "$offload" = 1 ] && [ "$cmd" = add ]; then
	case "$proto" in icmp | icmpv6) die "--offload with --proto $proto: ICMP flows are never offloaded" ;; esac
fi
if [ "$notrack" = 1 ] && [ "$cmd" = add ]; then
	case "$chain" in INPUT | OUTPUT) ;; *) die "--notrack-forwarded with --chain $chain: only INPUT or OUTPUT (a FORWARD rule needs forwarded datagrams whole)" ;; esac
fi
if [ -n "$netns" ]; then
	ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$netns" || fail "--netns '$netns': no such network namespace"
fi
[ "$dry" = 1 ] || [ "$(id -u)" = 0 ] || fail "must run as root (changes firewall rules)"
# For tests only: RULES_SH_TEST_VERDICT=accept|continue puts that verdict in
# the nft backend's rules instead of the queue statement, so that every other
# part of them (table, chain, match, counter, tag) can be applied and checked
# on a kernel without nft_queue (CONFIG_NFT_QUEUE). Such a rule queues
# nothing: never use it outside a test's namespace.
test_verdict=${RULES_SH_TEST_VERDICT:-}
case "$test_verdict" in
'') ;;
accept | continue)
	# Only add writes a verdict; del and list find the rules by their tag.
	if [ "$cmd" = add ]; then
		[ "$backend" = nft ] || die "RULES_SH_TEST_VERDICT is for --backend nft only"
		echo "$PROG: RULES_SH_TEST_VERDICT=$test_verdict: the nft rule says '$test_verdict' instead of queueing (tests only)" >&2
	fi
	;;
*) die "RULES_SH_TEST_VERDICT '$test_verdict': want accept or continue (tests only)" ;;
esac

# shquote ARG...: the arguments as a shell would need them, each word that
# holds anything but [A-Za-z0-9_./:=@%+,-] in single quotes (a comment's
# spaces, say), so that a --dry-run line pasted into a shell does the same.
shquote() {
	local a out=""
	for a in "$@"; do
		case "$a" in
		'' | *[!A-Za-z0-9_./:=@%+,-]*) out="$out '${a//\'/\'\\\'\'}'" ;;
		*) out="$out $a" ;;
		esac
	done
	echo "${out# }"
}

# run CMD...: in the namespace if asked; with --dry-run only print it.
run() {
	if [ "$dry" = 1 ]; then
		echo "${netns:+ip netns exec $netns }$(shquote "$@")"
		return 0
	fi
	if [ -n "$netns" ]; then ip netns exec "$netns" "$@"; else "$@"; fi
}
# query CMD...: like run, but also under --dry-run (read-only commands).
query() { if [ -n "$netns" ]; then ip netns exec "$netns" "$@"; else "$@"; fi; }

# The tag names the rule, so that del finds exactly this rule and no other.
desc="$TAG queue=$queue"
[ -n "$proto" ] && desc="$desc proto=$proto"
[ -n "$dport" ] && desc="$desc dport=$dport"
[ -n "$sport" ] && desc="$desc sport=$sport"
[ -n "$src" ] && desc="$desc src=$src"
[ "$syn" = 1 ] && desc="$desc syn"
[ -n "$icmptype" ] && desc="$desc icmptype=$icmptype"
[ -n "$ctstate" ] && desc="$desc ctstate=$ctstate"
[ "$fastpath" = 1 ] && desc="$desc fastpath"
[ "$fpct" = 1 ] && desc="$desc conntrack"
# The fast path's defragmentation rule (see the top of this file).
DEFRAG_SPEC=(-m mark --mark "$PUNT_MARK/$PUNT_MARK" -m socket -m comment --comment "$TAG fastpath-defrag")

# ---------------------------------------------------------------- iptables
ipt_tools() { # the tools for the family
	case "$family" in
	ipv4) echo iptables ;;
	ipv6) echo ip6tables ;;
	both) echo iptables ip6tables ;;
	esac
}

ipt_spec() { # tool -> rule spec (without chain)
	local p=$proto spec=()
	[ "$1" = ip6tables ] && [ "$p" = icmp ] && p=icmpv6
	[ "$1" = iptables ] && [ "$p" = icmpv6 ] && p=icmp
	[ -n "$src" ] && spec+=(-s "$src")
	[ -n "$p" ] && spec+=(-p "$p")
	[ -n "$dport" ] && spec+=(--dport "${dport/-/:}")
	[ -n "$sport" ] && spec+=(--sport "${sport/-/:}")
	[ "$syn" = 1 ] && spec+=(--syn)
	if [ -n "$icmptype" ]; then
		if [ "$p" = icmpv6 ]; then spec+=(--icmpv6-type "$icmptype"); else spec+=(--icmp-type "$icmptype"); fi
	fi
	[ "$fastpath" = 1 ] && spec+=(-m mark --mark "$PUNT_MARK/$PUNT_MARK")
	# Defragmentation before the queue (see the top of this file); the
	# fast path's, unless --conntrack, comes from DEFRAG_SPEC's rule.
	if [ "$fastpath" = 0 ] || [ "$fpct" = 1 ]; then spec+=(-m conntrack --ctstate "$IPT_CTSTATE"); fi
	spec+=(-m comment --comment "$desc" -j NFQUEUE)
	if [ "$qlo" = "$qhi" ]; then spec+=(--queue-num "$qlo"); else spec+=(--queue-balance "$qlo:$qhi"); fi
	spec+=(--queue-bypass)
	printf '%s\n' "${spec[@]}"
}

quoted() { local a out=""; for a in "$@"; do case "$a" in *' '*) out="$out \"$a\"" ;; *) out="$out $a" ;; esac; done; echo "${out# }"; }

ipt_add() {
	local t spec
	# The defragmentation rule first: if it cannot be added, no queue rule is.
	[ "$fastpath" = 0 ] || [ "$fpct" = 1 ] || defrag_add
	for t in $(ipt_tools); do
		command -v "$t" >/dev/null || fail "$t not found (apt-get install iptables)"
		mapfile -t spec < <(ipt_spec "$t")
		if query "$t" -w "${ipt_table[@]}" -C "$chain" "${spec[@]}" 2>/dev/null; then
			echo "$PROG: present: $t ${ipt_table[*]} -I $chain $(quoted "${spec[@]}")"
			continue
		fi
		run "$t" -w "${ipt_table[@]}" -I "$chain" 1 "${spec[@]}" || fail "$t: could not add the rule"
		[ "$dry" = 1 ] || echo "$PROG: added: $t ${ipt_table[*]} -I $chain $(quoted "${spec[@]}")"
	done
}

# defrag_add: the fast path's defragmentation rule, once per family.
defrag_add() {
	local t
	for t in $(ipt_tools); do
		query "$t" -w -t mangle -C PREROUTING "${DEFRAG_SPEC[@]}" 2>/dev/null && continue
		command -v "$t" >/dev/null || fail "$t not found (apt-get install iptables)"
		run "$t" -w -t mangle -A PREROUTING "${DEFRAG_SPEC[@]}" || fail "$t: could not add the defragmentation rule (no socket match, xt_socket, in this kernel?): add --fastpath --conntrack keeps defragmentation on through conntrack instead"
		[ "$dry" = 1 ] || echo "$PROG: added: $t -t mangle -A PREROUTING $(quoted "${DEFRAG_SPEC[@]}")"
	done
}

# defrag_del: that rule, once no fastpath rule of its family is left.
defrag_del() {
	local t
	for t in $(ipt_tools); do
		command -v "$t" >/dev/null || continue
		ipt_ours "$t" | grep -q ' fastpath[" ]' && continue
		query "$t" -w -t mangle -C PREROUTING "${DEFRAG_SPEC[@]}" 2>/dev/null || continue
		run "$t" -w -t mangle -D PREROUTING "${DEFRAG_SPEC[@]}" || fail "$t: could not delete the defragmentation rule"
		[ "$dry" = 1 ] || echo "$PROG: deleted: $t -t mangle -D PREROUTING $(quoted "${DEFRAG_SPEC[@]}")"
	done
}

ipt_del() {
	local t spec n old
	for t in $(ipt_tools); do
		command -v "$t" >/dev/null || continue
		for old in 0 1; do
			if [ "$old" = 0 ]; then
				mapfile -t spec < <(ipt_spec "$t")
			else
				# del --fastpath also removes add --fastpath's rule of
				# before issue 27: the conntrack match, the same comment.
				[ "$fastpath" = 1 ] && [ "$fpct" = 0 ] || continue
				mapfile -t spec < <(fpct=1 ipt_spec "$t")
			fi
			n=0
			while query "$t" -w "${ipt_table[@]}" -C "$chain" "${spec[@]}" 2>/dev/null; do
				run "$t" -w "${ipt_table[@]}" -D "$chain" "${spec[@]}" || fail "$t: could not delete the rule"
				n=$((n + 1))
				[ "$dry" = 1 ] && break
				[ $n -lt 100 ] || fail "$t: rule keeps coming back"
			done
			[ $n -gt 0 ] && [ "$dry" = 0 ] && echo "$PROG: deleted: $t ${ipt_table[*]} -D $chain $(quoted "${spec[@]}")"
		done
	done
	[ "$fastpath" = 0 ] || defrag_del
	return 0
}

# ours TOOL: our rules as "-A CHAIN ..." lines (iptables -S syntax).
ipt_ours() { query "$1" -w "${ipt_table[@]}" -S 2>/dev/null | grep -E -- "--comment \"?$TAG( |\")" ; }

# numbered TOOL: our rules as "CHAIN N -A CHAIN ..." lines, N being the rule's
# number in its chain (the order of iptables -S is the order of the chain).
ipt_numbered() {
	query "$1" -w "${ipt_table[@]}" -S 2>/dev/null | awk -v tag="$TAG" '
		$1 != "-A" { next }
		{ n[$2]++ }
		index($0, "--comment \"" tag " ") || index($0, "--comment " tag " ") || index($0, "--comment \"" tag "\"") {
			print $2, n[$2], $0
		}'
}

# Rules are deleted by number, last first, never by replaying -S output (no
# eval of text that a comment could fill). Each number is checked just before
# its delete (iptables -S CHAIN N must print the same rule); if the chain has
# changed meanwhile, the rules are listed again.
ipt_del_all() {
	local t chain num line i clean
	local -a rules
	for t in iptables ip6tables; do
		command -v "$t" >/dev/null || continue
		clean=0
		for _ in $(seq 100); do
			mapfile -t rules < <(ipt_numbered "$t")
			if [ ${#rules[@]} -eq 0 ]; then clean=1; break; fi
			for ((i = ${#rules[@]} - 1; i >= 0; i--)); do
				read -r chain num line <<<"${rules[i]}"
				if [ "$dry" = 0 ] && [ "$(query "$t" -w "${ipt_table[@]}" -S "$chain" "$num" 2>/dev/null)" != "$line" ]; then
					break # the chain changed under us: list again
				fi
				run "$t" -w "${ipt_table[@]}" -D "$chain" "$num" </dev/null || fail "$t: could not delete rule $num of $chain: $line"
				[ "$dry" = 1 ] || echo "$PROG: deleted: $t $line"
			done
			# under --dry-run nothing was deleted: one listing is the answer;
			# otherwise list again, until none is left
			if [ "$dry" = 1 ]; then clean=1; break; fi
		done
		[ "$clean" = 1 ] || fail "$t: our rules keep changing; some are left (rules.sh list)"
	done
	return 0
}

ipt_list() {
	local t
	for t in iptables ip6tables; do
		command -v "$t" >/dev/null || continue
		ipt_ours "$t" | sed "s/^/$t /"
	done
	return 0
}

# ---------------------------------------------------------------- nft
nft_chain() { echo "$chain" | tr '[:upper:]' '[:lower:]'; }

nft_expr() {
	local e=""
	case "$family" in
	ipv4) e="meta nfproto ipv4 " ;;
	ipv6) e="meta nfproto ipv6 " ;;
	esac
	if [ -n "$src" ]; then
		if [ "$src_family" = ipv6 ]; then e="${e}ip6 saddr $src "; else e="${e}ip saddr $src "; fi
	fi
	case "$proto" in
	'') ;;
	icmp) # icmp is icmpv6 for IPv6, as with ip6tables
		if [ "$family" = both ]; then e="${e}meta l4proto { icmp, ipv6-icmp } "; else e="${e}meta l4proto icmp "; fi ;;
	icmpv6) e="${e}meta l4proto ipv6-icmp " ;;
	*) e="${e}meta l4proto $proto " ;;
	esac
	[ -n "$dport" ] && e="${e}th dport $dport "
	[ -n "$sport" ] && e="${e}th sport $sport "
	[ "$syn" = 1 ] && e="${e}tcp flags & (fin|syn|rst|ack) == syn "
	if [ -n "$icmptype" ]; then
		if [ "$proto" = icmpv6 ]; then e="${e}icmpv6 type $icmptype "; else e="${e}icmp type $icmptype "; fi
	fi
	# Defragmentation before the queue (see the top of this file).
	e="${e}ct state $NFT_CTSTATE "
	if [ -n "$test_verdict" ]; then
		e="${e}counter $test_verdict"
	elif [ "$qlo" = "$qhi" ]; then
		e="${e}counter queue flags bypass to $qlo"
	else
		e="${e}counter queue flags bypass to $qlo-$qhi"
	fi
	echo "$e comment \"$desc family=$family\""
}

nft_handles() { # chain -> handles of the rules carrying exactly our tag
	query nft -a list chain inet "$NFT_TABLE" "$1" 2>/dev/null |
		awk -v tag="comment \"$desc family=$family\"" 'index($0, tag) { print $NF }'
}

nft_add() {
	local c h
	command -v nft >/dev/null || fail "nft not found (apt-get install nftables)"
	c=$(nft_chain)
	h=$(nft_handles "$c")
	if [ -n "$h" ]; then
		echo "$PROG: present: nft add rule inet $NFT_TABLE $c $(nft_expr)"
		return 0
	fi
	# "add table/chain" are no-ops when they exist; priority -10 runs before
	# the usual filter chains (priority 0). --dry-run prints the very input
	# nft -f gets, as a here-document: pasted into a shell, it does the same
	# (the rule's comment keeps its quotes, which nft needs).
	local err cmds
	cmds="add table inet $NFT_TABLE
add chain inet $NFT_TABLE $c { type filter hook $c priority -10; policy accept; }
add rule inet $NFT_TABLE $c $(nft_expr)"
	if [ "$dry" = 1 ]; then
		echo "${netns:+ip netns exec $netns }nft -f - <<'EOF'"
		echo "$cmds"
		echo "EOF"
		return 0
	fi
	if ! err=$(run nft -f - 2>&1 <<<"$cmds"); then
		echo "$err" >&2
		nft_drop_empty_table
		if echo "$err" | grep -q 'No such file or directory'; then
			fail "nft: the kernel refused the queue statement: it has no nft_queue support (CONFIG_NFT_QUEUE); use --backend iptables"
		fi
		fail "nft: could not add the rule"
	fi
	[ -z "$err" ] || echo "$err"
	echo "$PROG: added: nft add rule inet $NFT_TABLE $c $(nft_expr)"
}

# drop_empty_table TABLE ERE: delete nft table inet TABLE unless a line of
# its listing matches ERE (a rule it exists for).
drop_empty_table() {
	[ "$dry" = 1 ] && return 0
	local t
	# Read the listing whole: grep -q stopping early would fail the pipe.
	t=$(query nft list table inet "$1" 2>/dev/null) || return 0
	if ! grep -Eq "$2" <<<"$t"; then
		run nft delete table inet "$1"
	fi
	return 0
}

nft_drop_empty_table() { drop_empty_table "$NFT_TABLE" 'queue'; }

nft_del() {
	local c h
	command -v nft >/dev/null || return 0
	c=$(nft_chain)
	for h in $(nft_handles "$c"); do
		run nft delete rule inet "$NFT_TABLE" "$c" handle "$h" || fail "nft: could not delete rule handle $h"
		[ "$dry" = 1 ] || echo "$PROG: deleted: nft rule inet $NFT_TABLE $c handle $h ($desc family=$family)"
	done
	nft_drop_empty_table
}

# nft_del_table TABLE deletes table inet TABLE, if there is one.
nft_del_table() {
	command -v nft >/dev/null || return 0
	if query nft list table inet "$1" >/dev/null 2>&1; then
		run nft delete table inet "$1" || fail "nft: could not delete table inet $1"
		[ "$dry" = 1 ] || echo "$PROG: deleted: nft table inet $1"
	fi
	return 0
}

nft_list() {
	command -v nft >/dev/null || return 0
	query nft list table inet "$NFT_TABLE" 2>/dev/null | grep 'queue' | sed 's/^[[:space:]]*/nft /'
	return 0
}

# ---------------------------------------------------------------- offload
# The drop rules of packetshaper --offload live in their own nft table, with
# either backend: an nft table works beside iptables(-nft) rules, and its
# chains run at priority OFF_PRIO, before the filter chains (0) that hold the
# iptables NFQUEUE rules and before the nft backend's queue chains (-10).

off_fams() { case "$family" in ipv4) echo 4 ;; ipv6) echo 6 ;; both) echo 4 6 ;; esac; }

# The tag names the queue rule the drop rules go with (and its backend, as
# both backends' rules share this table).
off_tag() { echo "comment \"$desc family=$family backend=$backend\""; }

# off_rules: the drop rules that go with the queue rule, one per line as
# "SET<TAB>EXPR" (without the tag). Each starts with the queue rule's match
# (family, source, protocol, destination port) so that only packets the
# queue rule would queue are ever dropped, then looks the packet's exact
# tuple up in the set. ICMP is never offloaded: no rule for it.
off_rules() {
	local f m a pm t
	for f in $(off_fams); do
		a=ip
		[ "$f" = 6 ] && a=ip6
		m="meta nfproto ipv$f "
		[ -n "$src" ] && m="${m}$a saddr $src "
		[ -n "$proto" ] && m="${m}meta l4proto $proto "
		[ -n "$dport" ] && m="${m}th dport $dport "
		[ -n "$sport" ] && m="${m}th sport $sport "
		# --syn and --ctstate narrow the offload rule as the queue rule.
		[ "$syn" = 1 ] && m="${m}tcp flags & (fin|syn|rst|ack) == syn "
		[ -n "$ctstate" ] && m="${m}ct state $NFT_CTSTATE "
		case "$proto" in
		'' | udp | tcp | sctp | udplite)
			pm=""
			[ -z "$proto" ] && pm="meta l4proto { tcp, udp, udplite, sctp } "
			t="$a saddr . $a daddr . meta l4proto . th sport . th dport"
			printf 'ports%s\t%s%s%s @ports%s add @ports%s { %s %s } counter drop\n' "$f" "$m" "$pm" "$t" "$f" "$f" "$t" "$OFF_NOLIMIT"
			;;
		esac
		case "$proto" in
		'' | esp | ah | gre)
			t="$a saddr . $a daddr . meta l4proto"
			printf 'noports%s\t%s%s @noports%s add @noports%s { %s %s } counter drop\n' "$f" "$m" "$t" "$f" "$f" "$t" "$OFF_NOLIMIT"
			;;
		esac
	done
}

# off_handles CHAIN SET: handles of our drop rules on SET with exactly our tag.
off_handles() {
	query nft -a list chain inet "$OFF_TABLE" "$1" 2>/dev/null |
		awk -v tag="$(off_tag)" -v set="@$2 " 'index($0, tag) && index($0, set) { print $NF }'
}

off_sets() { # the table and its sets, as nft -f lines ("add" is a no-op when they exist)
	local f t
	echo "add table inet $OFF_TABLE"
	for f in 4 6; do
		t=ipv4_addr
		[ "$f" = 6 ] && t=ipv6_addr
		echo "add set inet $OFF_TABLE ports$f { type $t . $t . inet_proto . inet_service . inet_service; flags dynamic,timeout; timeout $OFF_TIMEOUT; size $OFF_SIZE; }"
		echo "add set inet $OFF_TABLE noports$f { type $t . $t . inet_proto; flags dynamic,timeout; timeout $OFF_TIMEOUT; size $OFF_SIZE; }"
	done
}

off_add() {
	local c set expr err tag
	local -a cmds added=()
	command -v nft >/dev/null || fail "nft not found (apt-get install nftables): --offload needs it with either backend"
	c=$(nft_chain)
	tag=$(off_tag)
	mapfile -t cmds < <(off_sets)
	cmds+=("add chain inet $OFF_TABLE $c { type filter hook $c priority $OFF_PRIO; policy accept; }")
	while IFS=$'\t' read -r set expr; do
		if [ -n "$(off_handles "$c" "$set")" ]; then
			echo "$PROG: present: nft add rule inet $OFF_TABLE $c $expr $tag"
			continue
		fi
		cmds+=("add rule inet $OFF_TABLE $c $expr $tag")
		added+=("nft add rule inet $OFF_TABLE $c $expr $tag")
	done < <(off_rules)
	[ ${#added[@]} -gt 0 ] || return 0
	if [ "$dry" = 1 ]; then
		echo "${netns:+ip netns exec $netns }nft -f - <<'EOF'"
		printf '%s\n' "${cmds[@]}"
		echo "EOF"
		return 0
	fi
	if ! err=$(printf '%s\n' "${cmds[@]}" | run nft -f - 2>&1); then
		echo "$err" >&2
		off_drop_empty_table
		fail "nft: could not add the offload rules (table inet $OFF_TABLE)"
	fi
	[ -z "$err" ] || echo "$err"
	printf "$PROG: added: %s\n" "${added[@]}"
}

# The table goes with its last drop rule: its sets hold nothing useful then.
off_drop_empty_table() { drop_empty_table "$OFF_TABLE" '@(no)?ports[46] '; }

off_del() {
	local c set h
	command -v nft >/dev/null || return 0
	query nft list table inet "$OFF_TABLE" >/dev/null 2>&1 || return 0
	c=$(nft_chain)
	for set in ports4 ports6 noports4 noports6; do
		for h in $(off_handles "$c" "$set"); do
			run nft delete rule inet "$OFF_TABLE" "$c" handle "$h" || fail "nft: could not delete rule handle $h of table inet $OFF_TABLE"
			[ "$dry" = 1 ] || echo "$PROG: deleted: nft rule inet $OFF_TABLE $c handle $h (@$set, $desc family=$family backend=$backend)"
		done
	done
	off_drop_empty_table
}

off_list() {
	command -v nft >/dev/null || return 0
	query nft list table inet "$OFF_TABLE" 2>/dev/null | grep -E '@(no)?ports[46] ' | sed 's/^[[:space:]]*/nft /'
	return 0
}

# ---------------------------------------------------------------- notrack
# --notrack-forwarded (see the top of this file): one table, one rule per
# family given, added once.
notrack_add() {
	local m="" tag="comment \"$TAG notrack-forwarded\""
	command -v nft >/dev/null || fail "nft not found (apt-get install nftables): --notrack-forwarded needs it with either backend"
	case "$family" in ipv4) m="meta nfproto ipv4 " ;; ipv6) m="meta nfproto ipv6 " ;; esac
	local rule="${m}fib daddr type != local notrack $tag"
	if query nft list chain inet "$NOTRACK_TABLE" prerouting 2>/dev/null | grep -qF "${m}fib daddr type != local notrack"; then
		echo "$PROG: present: nft add rule inet $NOTRACK_TABLE prerouting $rule"
		return 0
	fi
	local cmds="add table inet $NOTRACK_TABLE
add chain inet $NOTRACK_TABLE prerouting { type filter hook prerouting priority -450; policy accept; }
add rule inet $NOTRACK_TABLE prerouting $rule"
	if [ "$dry" = 1 ]; then
		printf "%snft -f - <<'EOF'\n%s\nEOF\n" "${netns:+ip netns exec $netns }" "$cmds"
		return 0
	fi
	printf '%s\n' "$cmds" | run nft -f - || fail "nft: could not add the notrack rule (table inet $NOTRACK_TABLE)"
	echo "$PROG: added: nft add rule inet $NOTRACK_TABLE prerouting $rule"
}

# ---------------------------------------------------------------- main
case "$cmd" in
add)
	# The drop rules first: if they cannot be added, no queue rule is; if
	# the queue rule cannot be, they go again.
	[ "$offload" = 0 ] || off_add
	("${backend/iptables/ipt}_add") || {
		rc=$?
		[ "$offload" = 0 ] || off_del >/dev/null
		exit "$rc"
	}
	[ "$notrack" = 0 ] || notrack_add ;;
del)
	# A queue rule's drop rules go with it, --offload or not.
	if [ "$all" = 1 ]; then ipt_del_all; ipt_table=(-t mangle); ipt_del_all; ipt_table=(); nft_del_table "$NFT_TABLE"; nft_del_table "$OFF_TABLE"; nft_del_table "$NOTRACK_TABLE"; else "${backend/iptables/ipt}_del"; off_del; [ "$notrack" = 0 ] || nft_del_table "$NOTRACK_TABLE"; fi ;;
list) if [ "$backend" = nft ]; then nft_list; else ipt_list; ipt_table=(-t mangle); ipt_list; ipt_table=(); nft_list; fi; off_list ;;
esac
