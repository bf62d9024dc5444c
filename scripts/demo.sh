#!/usr/bin/env bash
# demo.sh - see packetshaper limit real traffic, per flow, in a minute.
#
#   sudo ./scripts/demo.sh
#
# Run as root on a Debian machine. It installs what it needs if missing
# (iproute2, iptables, nftables, iputils-ping, ca-certificates; Go is
# expected in /usr/local/go or on PATH), builds packetshaper and psend, and
# creates two network namespaces joined by a veth pair:
#
#   psdemo-XXXX-a (10.77.0.1)  --veth-->  psdemo-XXXX-b (10.77.0.2)
#     psend send: FLOWS UDP flows          iptables NFQUEUE rule (bypass)
#     at PPS packets/s each                packetshaper --queue 0 --pps RATE
#                                          psend recv: counts what arrives
#
# then prints, per flow, what was sent, what arrived and what should have
# arrived (burst + RATE × duration). Traffic never leaves the two namespaces.
# Everything it created is removed on exit, also on Ctrl-C.
#
# Environment (defaults): FLOWS=4 PPS=250 (per flow: 1000 packets/s in all)
#   DURATION=4 (s) RATE=100 (packets/s per flow) BURST=5 ALGO=token-bucket
set -euo pipefail

FLOWS=${FLOWS:-4}
PPS=${PPS:-250}
DURATION=${DURATION:-4}
RATE=${RATE:-100}
BURST=${BURST:-5}
ALGO=${ALGO:-token-bucket}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

if [ -t 1 ]; then say() { printf '\033[1m==> %s\033[0m\n' "$*"; }; else say() { echo "==> $*"; }; fi
die() { echo "demo.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it creates network namespaces and firewall rules): sudo $0"
for v in FLOWS PPS DURATION RATE BURST; do
	case "${!v}" in '' | *[!0-9.]*) die "$v='${!v}': want a number" ;; esac
done

# ---------------------------------------------------------------- packages
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
command -v nft >/dev/null || missing+=(nftables) # for rules.sh --backend nft
command -v ping >/dev/null || missing+=(iputils-ping)
# go build may fetch modules over HTTPS
[ -s /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them by hand"
	# a freshly booted machine's apt-daily may hold the dpkg lock for a while
	{ apt-get -o DPkg::Lock::Timeout=600 update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null; } ||
		die "apt-get install ${missing[*]} failed"
fi
command -v go >/dev/null || die "Go not found (looked on PATH and in /usr/local/go/bin): install Go 1.26 from https://go.dev/dl/"

# ---------------------------------------------------------------- cleanup
ID=$(printf '%04x' $((RANDOM % 65536)))
NS_A=psdemo-$ID-a NS_B=psdemo-$ID-b
VETH_A=psd${ID}a VETH_B=psd${ID}b
IP_A=10.77.0.1 IP_B=10.77.0.2
WORK=$(mktemp -d /tmp/psdemo.XXXXXX)
PIDS=()
MADE_A=0 MADE_B=0 # set once this run has created the namespace

# Every step may fail (set -e must not cut the cleanup short), and only what
# this run created is removed.
cleanup() {
	local rc=$? p
	set +e
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	sleep 0.2
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	[ "$MADE_A" = 0 ] || ip netns del "$NS_A" || true
	[ "$MADE_B" = 0 ] || ip netns del "$NS_B" || true
	rm -rf "$WORK" || true
	[ $rc = 0 ] || echo "demo.sh: stopped (status $rc); what it had created is removed" >&2
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- build
say "building packetshaper and psend"
(cd "$ROOT" && go build -o "$WORK/packetshaper" ./cmd/packetshaper && go build -o "$WORK/psend" ./internal/cmd/psend) ||
	die "go build failed"

# ---------------------------------------------------------------- namespaces
say "creating namespaces $NS_A ($IP_A) and $NS_B ($IP_B), joined by a veth pair"
ip netns add "$NS_A"
MADE_A=1
ip netns add "$NS_B"
MADE_B=1
ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B"
ip -n "$NS_A" addr add "$IP_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$IP_B/24" dev "$VETH_B"
for l in lo "$VETH_A"; do ip -n "$NS_A" link set "$l" up; done
for l in lo "$VETH_B"; do ip -n "$NS_B" link set "$l" up; done
ip netns exec "$NS_A" ping -c 1 -W 2 "$IP_B" >/dev/null || die "the veth link does not work"

say "diverting UDP to port 9000 in $NS_B to NFQUEUE 0 (scripts/rules.sh)"
"$HERE/rules.sh" add --netns "$NS_B" --queue 0 --proto udp --dport 9000 --family ipv4

say "starting packetshaper in $NS_B: --queue 0 --pps $RATE --burst $BURST --algo $ALGO"
ip netns exec "$NS_B" "$WORK/packetshaper" --queue 0 --pps "$RATE" --burst "$BURST" --algo "$ALGO" \
	>"$WORK/packetshaper.log" 2>&1 &
PIDS+=("$!")
SHAPER=$!
# queue_bound: is a program bound to queue 0 in $NS_B?
# shellcheck disable=SC2016 # awk's own $1
queue_bound() { ip netns exec "$NS_B" awk '$1==0{f=1} END{exit !f}' /proc/net/netfilter/nfnetlink_queue 2>/dev/null; }
for _ in $(seq 100); do
	queue_bound && break
	kill -0 "$SHAPER" 2>/dev/null || { cat "$WORK/packetshaper.log" >&2; die "packetshaper exited"; }
	sleep 0.1
done
queue_bound ||
	{ cat "$WORK/packetshaper.log" >&2; die "packetshaper did not bind queue 0 within 10 s"; }

ip netns exec "$NS_B" "$WORK/psend" recv --listen :9000 --duration "$(awk -v d="$DURATION" 'BEGIN{print d+30 "s"}')" \
	--idle 1s >"$WORK/recv.json" 2>"$WORK/recv.log" &
RECV=$!
PIDS+=("$RECV")
for _ in $(seq 50); do grep -q listening "$WORK/recv.log" 2>/dev/null && break; sleep 0.1; done

say "sending $FLOWS UDP flows × $PPS packets/s for $DURATION s from $NS_A"
# In the background and waited for, so that Ctrl-C is handled at once.
ip netns exec "$NS_A" "$WORK/psend" send --dst "$IP_B:9000" --flows "$FLOWS" --pps "$PPS" \
	--duration "${DURATION}s" >"$WORK/send.json" &
SEND=$!
PIDS+=("$SEND")
wait "$SEND" || die "psend send failed"
wait "$RECV" || die "psend recv failed: $(cat "$WORK/recv.log")"

say "stopping packetshaper (SIGTERM)"
kill -TERM "$SHAPER" 2>/dev/null || true
for _ in $(seq 50); do kill -0 "$SHAPER" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SHAPER" 2>/dev/null; then
	echo "demo.sh: packetshaper did not stop within 5 s of SIGTERM: SIGKILL" >&2
	kill -KILL "$SHAPER" 2>/dev/null || true
fi
wait "$SHAPER" || echo "demo.sh: packetshaper exited with status $?" >&2
# The log as packetshaper wrote it, each line wrapped at spaces to the
# terminal's width (a stats line holds every counter: ~900 characters), the
# continuation lines indented further (--log-format json logs each line
# whole, for a machine).
cols=$(tput cols 2>/dev/null || echo 100)
[ "$cols" -ge 60 ] 2>/dev/null || cols=100
while IFS= read -r line; do
	printf '%s\n' "$line" | fold -s -w $((cols - 8)) | sed -e '1s/^/    /' -e '2,$s/^/        /'
done <"$WORK/packetshaper.log"

echo
say "per flow: sent by $NS_A, arrived in $NS_B, expected = min(sent, $BURST + $RATE/s × duration)"
"$WORK/psend" report --send "$WORK/send.json" --recv "$WORK/recv.json" --port 9000 --rate "$RATE" --burst "$BURST"
echo
say "done; removing $NS_A and $NS_B"
