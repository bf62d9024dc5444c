#!/usr/bin/env bash
# newcomer-test.sh: the traps a new user fell into on a fresh clone (issue
# 30), each run as that user would, with what packetshaper must now say:
#
#   ./scripts/newcomer-test.sh          # the offline traps (no root)
#   sudo ./scripts/newcomer-test.sh     # and the live ones
#
# NEWCOMER_LIVE_RAN=WHERE: the live ones are e2e tests that already ran in
# WHERE (scripts/test.sh's e2e stage sets it): not run twice.
#
#  1. units: bitrate = "10mbps" (tc's megabytes per second) is accepted with
#     a warning naming the bit-rate it means, 80mbit, and the mbit form;
#     check prints every bitrate in bits with its bits/s beside it, integers
#     as integers; a negative and a zero rate say what is wrong.
#  2. the packaged configuration (dist/default, policy/testdata/example.toml)
#     passes its own check with no warning: as root, in a mount and network
#     namespace of its own with dist/default as /etc/default/packetshaper;
#     otherwise through cmd/packetshaper's TestCheckPackagedDefault.
#  3. a policing rule that takes TCP is warned, pointing to shape = true;
#     the same rule shaping is not.
#  4. replay: a file given twice as one capture (--concatenate) warns that
#     capture time goes back; without it each file keeps its own clock, no
#     warning, twice the capture time.
#  5. --help starts with the usage and one sentence.
#  6. as root: a plain TCP transfer (iperf3) through the queue raises no
#     fail-open warning and failopen_exact stays 1 (e2e/TestFailOpenGSOTCP),
#     and a shaper no divert rule feeds says so once, with the command that
#     adds one (e2e/TestIdleQueueWarns); both in namespaces they create.
#
# Exit status 0 when every trap is closed; 1 with one line per failure.
# scripts/test.sh runs it as a check of the e2e stage, after go test ./e2e.
set -uo pipefail
PROG=newcomer-test.sh
cd "$(dirname "$0")/.." || exit 1
export PATH=$PATH:/usr/local/go/bin
failed=0
fail() {
	echo "$PROG: FAIL: $*" >&2
	failed=1
}
ok() { echo "$PROG: ok: $*"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ps=$work/packetshaper
timeout 300 go build -o "$ps" ./cmd/packetshaper || { echo "$PROG: go build failed" >&2; exit 1; }

# has FILE TEXT: FILE holds TEXT (a fixed string).
has() { grep -qF -- "$2" "$1"; }

# ---------------------------------------------------------------- 1 units
cat >"$work/mbps.toml" <<'EOF'
[[rule]]
name    = "web"
match   = { proto = ["udp"], dport = ["8000"] }
bitrate = "10mbps"
burst   = 1000000
EOF
timeout 10 "$ps" check "$work/mbps.toml" >"$work/out" 2>"$work/err" || fail "check of a 10mbps rule: exit $? (want 0, with a warning)"
has "$work/err" 'packetshaper check: warning: rule "web": bitrate "10mbps" is 10 megabytes per second, as in tc (mbps is bytes, mbit is bits): 80mbit, 80000000 bits/s; write "80mbit" for that rate, or "10mbit" for 10 megabits per second' &&
	ok "10mbps: warned, naming 80mbit and the mbit form" || fail "10mbps: no warning naming the bit-rate: $(cat "$work/err")"
has "$work/out" 'bitrate = "80mbit" # 80000000 bits/s' && has "$work/out" 'burst = 1000000 # bytes' &&
	ok "check prints bitrate = \"80mbit\" # 80000000 bits/s, burst = 1000000" || fail "check's printed rate or burst: $(grep -E '^(bitrate|burst)' "$work/out")"
for bad in '-10mbit:is negative' '0kbit:is zero'; do
	rate=${bad%%:*} want=${bad#*:}
	printf '[[rule]]\nname = "a"\nmatch = { proto = ["udp"] }\nbitrate = "%s"\n' "$rate" >"$work/bad.toml"
	if timeout 10 "$ps" check "$work/bad.toml" >/dev/null 2>"$work/err"; then
		fail "bitrate $rate accepted"
	elif has "$work/err" "rate \"$rate\" $want"; then
		ok "bitrate $rate: $(cat "$work/err")"
	else
		fail "bitrate $rate: $(cat "$work/err") (want \"$want\")"
	fi
done

# ---------------------------------------------------------------- 2 the package's own configuration
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
	sed "s|/etc/packetshaper/policy.toml|$PWD/policy/testdata/example.toml|g" dist/default >"$work/default"
	# Its own network namespace (no divert rule in force there) and mount
	# namespace (dist/default as /etc/default/packetshaper, on a tmpfs).
	timeout 30 unshare -m -n --propagation private sh -c '
		mount -t tmpfs tmpfs /etc/default && cp "$1" /etc/default/packetshaper &&
		exec "$2" check policy/testdata/example.toml' sh "$work/default" "$ps" >"$work/out" 2>"$work/err"
	rc=$?
	if [ "$rc" = 0 ] && [ ! -s "$work/err" ]; then
		ok "the packaged configuration passes its own check with no warning (RULES_OPTS: $(grep '^RULES_OPTS' dist/default))"
	else
		fail "check of the packaged configuration: exit $rc: $(cat "$work/err")"
	fi
else
	timeout 300 go test -count=1 -run '^TestCheckPackagedDefault$' ./cmd/packetshaper >"$work/out" 2>&1 &&
		ok "the packaged configuration passes its own check (TestCheckPackagedDefault; as root it runs here with /etc/default/packetshaper)" ||
		fail "TestCheckPackagedDefault: $(tail -5 "$work/out")"
fi

# ---------------------------------------------------------------- 3 policing TCP
cat >"$work/tcp.toml" <<'EOF'
[[rule]]
name    = "web"
match   = { proto = ["tcp"], dport = ["80"] }
bitrate = "10mbit"
EOF
timeout 10 "$ps" check "$work/tcp.toml" >/dev/null 2>"$work/err" || fail "check of a TCP policing rule: exit $?"
has "$work/err" 'packetshaper check: warning: rule "web" polices TCP (its match takes TCP, and it drops what exceeds the rate): a TCP flow that loses packets backs off to about half the rate (one TCP transfer policed at 20mbit got 10.2 Mbit/s, shaped 19.5: docs/shaping.md); add shape = true' &&
	ok "a policing TCP rule: warned, pointing to shape = true" || fail "a policing TCP rule: $(cat "$work/err")"
printf 'shape = true\n' >>"$work/tcp.toml"
timeout 10 "$ps" check "$work/tcp.toml" >/dev/null 2>"$work/err" && [ ! -s "$work/err" ] &&
	ok "the same rule shaping: no warning" || fail "the shaping TCP rule: $(cat "$work/err")"

# ---------------------------------------------------------------- 4 replay's clock
cap=testdata/multiflow.pcap
timeout 30 "$ps" replay --pps 20 --concatenate "$cap" "$cap" >"$work/out" 2>"$work/err" || fail "replay --concatenate: exit $?"
has "$work/err" "packetshaper replay: warning: $cap: packet 1: capture time goes back 3.010125s (more than --max-backward 1s)" &&
	ok "a file given twice as one capture: $(head -1 "$work/err")" || fail "a file given twice with --concatenate: no time-jump warning: $(cat "$work/err")"
timeout 30 "$ps" replay --pps 20 "$cap" "$cap" >"$work/out" 2>"$work/err" || fail "replay of two files: exit $?"
[ ! -s "$work/err" ] && has "$work/out" 'capture    2 file(s), 6.020251s of capture time' &&
	ok "two files, each its own clock: no warning, $(grep -o '[0-9.]*s of capture time' "$work/out")" ||
	fail "two files without --concatenate: $(cat "$work/err") $(grep capture "$work/out")"

# ---------------------------------------------------------------- 5 help
timeout 10 "$ps" --help >"$work/out" 2>&1
[ "$(head -1 "$work/out")" = "Usage:" ] && [ "$(sed -n 5p "$work/out")" != "" ] &&
	ok "--help starts with the usage, then: $(sed -n 5p "$work/out")" || fail "--help starts: $(head -3 "$work/out")"

# ---------------------------------------------------------------- 6 GSO, live
if [ -n "${NEWCOMER_LIVE_RAN:-}" ]; then
	# test.sh's e2e stage ran (and counted) them: not twice.
	echo "$PROG: the live traps (e2e/TestFailOpenGSOTCP, TestIdleQueueWarns) ran in $NEWCOMER_LIVE_RAN"
elif [ "$(id -u)" = 0 ] && command -v iperf3 >/dev/null; then
	# Run alone: TestFailOpenGSOTCP is a serial test (PS_TEST_EXCLUSIVE).
	if PS_TEST_EXCLUSIVE=1 timeout 300 go test -count=1 -run '^(TestFailOpenGSOTCP|TestIdleQueueWarns)$' ./e2e >"$work/out" 2>&1; then
		ok "iperf3 TCP through the queue: no fail-open warning, failopen_exact 1 (e2e/TestFailOpenGSOTCP); nothing diverted: one WARN with the command (e2e/TestIdleQueueWarns)"
	else
		fail "e2e/TestFailOpenGSOTCP, TestIdleQueueWarns: $(grep -E 'newcomer_test|FAIL' "$work/out" | head -5)"
	fi
else
	echo "$PROG: skipped: the live traps (need root and iperf3)"
fi

[ "$failed" = 0 ] && echo "$PROG: every trap closed" || echo "$PROG: some traps remain open" >&2
exit "$failed"
