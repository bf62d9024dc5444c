#!/usr/bin/env bash
# package-systemd-test.sh: packetshaper.service run by systemd itself, for
# machines whose PID 1 is not systemd (CI's). Called by package-test.sh with
# the package installed:
#
#   sudo ./scripts/package-systemd-test.sh [WORKDIR [DEB]]
#
# Boots a container with systemd-nspawn: systemd as its PID 1, its own
# network namespace (only lo), its root a throwaway overlay of this machine's
# root (so the installed package is in it; nothing written inside reaches
# the host). /etc/default/packetshaper and the policy are replaced there by
# the test's: queue 0, UDP to port 9000, 100 packets/s per flow, burst 5,
# metrics on 127.0.0.1:9464. Inside, as systemd.run's command, the checks of
# inside.sh below run (with --fastpath lo too: the container gets CAP_BPF,
# CAP_PERFMON and bpf(2), which nspawn keeps from it by default); given DEB (the
# package the host has installed), also
# the maintainer scripts with systemd running: dpkg -r stops and disables a
# running service, dpkg -i makes systemd see the unit without starting it,
# a reinstall restarts a running one. Their log, the unit's journal and the
# container's console are in WORKDIR, and printed on failure. Exit status 0
# when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
PROG=package-systemd-test.sh
fail() { echo "$PROG: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "must run as root"
[ -x /usr/bin/packetshaper ] && [ -f /usr/lib/systemd/system/packetshaper.service ] || fail "install the package first (scripts/package-test.sh does)"
command -v systemd-nspawn >/dev/null || fail "systemd-nspawn not found (apt-get install systemd-container)"
work=${1:-$(mktemp -d /tmp/packetshaper-nspawn.XXXXXX)}
mkdir -p "$work"
work=$(realpath "$work")
rm -f "$work"/{result,inside.log,journal.txt,console.log}

# The traffic generator, from this tree.
go build -o "$work/psend" ./internal/cmd/psend
rm -f "$work/packetshaper.deb"
if [ -n "${2:-}" ]; then
	cp "$2" "$work/packetshaper.deb"
fi

# ---------------------------------------------------------------- inside
# The checks, run in the container as root by systemd.run (a oneshot
# service). They write inside.log and, last, result: PASS or FAIL.
cat >"$work/inside.sh" <<'INSIDE'
#!/bin/bash
set -u
exec >/out/inside.log 2>&1
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
finish() {
	journalctl -u packetshaper.service --no-pager -o short-monotonic >/out/journal.txt 2>&1
	if [ "$fails" = 0 ]; then echo PASS >/out/result; else echo "FAIL ($fails)" >/out/result; fi
	exit 0
}
bound() { grep -q '^ *0 ' /proc/net/netfilter/nfnetlink_queue 2>/dev/null; }
mainpid() { systemctl show -p MainPID --value packetshaper.service; }
# waitfor SECONDS CMD...: until CMD succeeds, at most SECONDS.
waitfor() {
	local n=$(($1 * 10)); shift
	while ! "$@"; do n=$((n - 1)); [ "$n" -gt 0 ] || return 1; sleep 0.1; done
}
echo "systemd $(systemctl --version | head -1), PID 1: $(cat /proc/1/comm)"
[ "$(cat /proc/1/comm)" = systemd ] || { bad "PID 1 is not systemd"; finish; }

systemctl start packetshaper.service || bad "systemctl start packetshaper.service"
systemctl is-active -q packetshaper.service || { bad "packetshaper.service is not active"; systemctl status --no-pager packetshaper.service; finish; }
ok "systemctl start: active"
waitfor 10 bound || bad "queue 0 is not bound"
pid=$(mainpid)
if [ "$pid" = 0 ] || ! systemctl is-active -q packetshaper.service; then
	bad "packetshaper.service did not stay up (main pid $pid)"
	systemctl status --no-pager packetshaper.service
	finish
fi
st=$(cat "/proc/$pid/status")
uid=$(awk '/^Uid:/ { print $2 }' <<<"$st")
user=$(ps -o user= -p "$pid")
[ "$uid" -ge 61184 ] && [ "$uid" -le 65519 ] && ok "runs as the dynamic user $user (uid $uid)" || bad "uid $uid ($user): want a dynamic user (61184-65519)"
# CAP_NET_ADMIN (bit 12), CAP_PERFMON (38) and CAP_BPF (39), nothing else.
for want in "CapEff:	000000c000001000" "CapPrm:	000000c000001000" "CapBnd:	000000c000001000" "CapAmb:	000000c000001000" "NoNewPrivs:	1" "Seccomp:	2"; do
	grep -qF "$want" <<<"$st" && ok "/proc/PID/status: $want" || bad "/proc/PID/status lacks '$want'"
done
# The sandbox seen from the service: / is read-only, /run/packetshaper is
# its own.
if nsenter -t "$pid" -m sh -c 'touch /etc/packetshaper-test 2>/dev/null'; then bad "/etc is writable in the service's mount namespace"; else ok "/etc is read-only for the service"; fi
ls -ld /run/packetshaper | grep -q "^drwxr-x--- .* $user " && ok "/run/packetshaper: $(ls -ld /run/packetshaper)" || bad "/run/packetshaper: $(ls -ld /run/packetshaper 2>&1)"
rules=$(packetshaper-rules list)
grep -q 'queue=0 proto=udp dport=9000' <<<"$rules" && ok "ExecStartPre added the rule: $rules" || bad "no queue rule after start: '$rules'"

# Traffic: 4 UDP flows at 500 packets/s for 2 s to 127.0.0.1:9000, limited to
# 100/s per flow with burst 5: about 4 × (5 + 200) arrive.
/out/psend recv --listen 127.0.0.1:9000 --duration 30s --idle 2s >/out/recv.json 2>/out/recv.err &
rpid=$!
waitfor 5 grep -q listening /out/recv.err || bad "psend recv does not listen"
/out/psend send --dst 127.0.0.1:9000 --flows 4 --sport 10000 --pps 500 --duration 2s >/out/send.json 2>/out/send.err || bad "psend send failed: $(cat /out/send.err)"
wait "$rpid" || bad "psend recv failed: $(cat /out/recv.err)"
sent=$(grep -o '"sent":[0-9]*' /out/send.json | tail -1 | cut -d: -f2)
recv=$(grep -o '"total":[0-9]*' /out/recv.json | cut -d: -f2)
echo "sent $sent, received $recv"
[ "${sent:-0}" -ge 3800 ] || bad "psend sent ${sent:-nothing}, want about 4000"
[ "${recv:-0}" -ge 738 ] && [ "${recv:-0}" -le 902 ] && ok "received $recv of $sent: 4 × (5 + 100/s × 2 s) = 820 ±10 %" || bad "received ${recv:-nothing} of ${sent:-?}: want 820 ±10 % (4 flows × (burst 5 + 100/s × 2 s))"

# Metrics, over loopback (IPAddressAllow=localhost).
m=$(exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3)
grep -q '^packetshaper_packets_total' <<<"$m" && ok "metrics: $(grep '^packetshaper_packets_total' <<<"$m")" || bad "GET /metrics: no packetshaper_packets_total"

# Reload: SIGHUP re-reads the policy.
systemctl reload packetshaper.service || bad "systemctl reload"
waitfor 5 sh -c 'journalctl -u packetshaper.service --no-pager | grep -q msg=reloaded' && ok "systemctl reload: reloaded" || bad "no 'reloaded' in the journal after systemctl reload"
[ "$(mainpid)" = "$pid" ] || bad "reload changed the main process"

# Restart=on-failure: SIGKILL, and it is back (RestartSec=5s), rules too.
kill -KILL "$pid"
waitfor 20 sh -c 'p=$(systemctl show -p MainPID --value packetshaper.service); [ "$p" != 0 ] && [ "$p" != '"$pid"' ] && systemctl is-active -q packetshaper.service' &&
	ok "restarted after SIGKILL: main pid $(mainpid)" || bad "not restarted after SIGKILL ($(systemctl is-active packetshaper.service))"
waitfor 10 bound || bad "queue 0 not bound after the restart"
packetshaper-rules list | grep -q 'queue=0' || bad "no queue rule after the restart"

# Stop: the rules go, the queue is unbound, the final stats are logged.
systemctl stop packetshaper.service || bad "systemctl stop"
rules=$(packetshaper-rules list)
[ -z "$rules" ] && ok "ExecStopPost removed the rules" || bad "rules left after stop: $rules"
bound && bad "queue 0 still bound after stop" || ok "queue 0 unbound"
journalctl -u packetshaper.service --no-pager | grep -q 'msg="final stats"' && ok "final stats logged" || bad "no final stats in the journal"
[ "$(systemctl show -p Result --value packetshaper.service)" = success ] || bad "Result=$(systemctl show -p Result --value packetshaper.service) after stop"

# --rt-priority with docs/operations.md's drop-in: LimitRTPRIO=1 (SCHED_FIFO without
# CAP_SYS_NICE) where systemd can raise that limit (it needs
# CAP_SYS_RESOURCE, which some machines' root lacks: then systemd quietly
# keeps the hard limit, 0), else docs/operations.md's other one, CAP_SYS_NICE.
mkdir -p /etc/systemd/system/packetshaper.service.d
if prlimit --rtprio=1:1 true 2>/dev/null; then
	rt=LimitRTPRIO=1
else
	rt=$'AmbientCapabilities=CAP_NET_ADMIN CAP_SYS_NICE\nCapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_NICE'
	echo "note: RLIMIT_RTPRIO cannot be raised here (no CAP_SYS_RESOURCE): --rt-priority with CAP_SYS_NICE instead"
fi
printf '%s\n' '[Service]' 'RestrictRealtime=no' "$rt" 'SystemCallFilter=' \
	'SystemCallFilter=@system-service' 'SystemCallFilter=~@privileged' >/etc/systemd/system/packetshaper.service.d/rt-priority.conf
sed -i 's|^PACKETSHAPER_OPTS="|PACKETSHAPER_OPTS="--rt-priority 1 |' /etc/default/packetshaper
systemctl daemon-reload
systemctl start packetshaper.service || bad "systemctl start with --rt-priority 1"
waitfor 10 bound || bad "queue 0 not bound with --rt-priority 1"
pid=$(mainpid)
if [ "$pid" != 0 ] && systemctl is-active -q packetshaper.service; then
	pol=$(chrt -p "$pid" | sed -n 's/.*scheduling policy: //p')
	[ "$pol" = SCHED_FIFO ] && ok "--rt-priority 1 with the drop-in (${rt%%$'\n'*}): $pol, CapEff $(awk '/^CapEff/ { print $2 }' "/proc/$pid/status")" || bad "--rt-priority 1 with the drop-in: policy '$pol'"
else
	bad "packetshaper.service with --rt-priority 1 did not stay up"
	journalctl -u packetshaper.service --no-pager | tail -3
fi
systemctl stop packetshaper.service || bad "systemctl stop (--rt-priority)"
rm -r /etc/systemd/system/packetshaper.service.d
sed -i 's|--rt-priority 1 ||' /etc/default/packetshaper
systemctl daemon-reload

# --fastpath under the unit's sandbox (CAP_BPF, CAP_PERFMON, bpf(2)): the
# fast path's divert rule (packetshaper-rules add --fastpath) and the
# program at tcx ingress of lo, required (--fastpath-required: refused, the
# service would exit). The policy's one rule runs in the kernel: the same
# traffic is limited as above, and the queue decides none of it.
sed -i 's|^RULES_OPTS=.*|RULES_OPTS="--fastpath"|; s|^PACKETSHAPER_OPTS="|PACKETSHAPER_OPTS="--fastpath lo --fastpath-required |' /etc/default/packetshaper
systemctl start packetshaper.service || bad "systemctl start with --fastpath lo"
waitfor 10 bound || bad "queue 0 not bound with --fastpath lo"
pid=$(mainpid)
if [ "$pid" != 0 ] && systemctl is-active -q packetshaper.service; then
	ok "--fastpath lo --fastpath-required: active (main pid $pid)"
	for want in "CapEff:	000000c000001000" "CapBnd:	000000c000001000" "CapAmb:	000000c000001000" "Seccomp:	2"; do
		grep -qF "$want" "/proc/$pid/status" && ok "--fastpath: /proc/PID/status: $want" || bad "--fastpath: /proc/PID/status lacks '$want'"
	done
	# The link comes after the queue's binding that "bound" waited for.
	waitfor 10 sh -c "grep -qs 'link_type:.*tcx' /proc/$pid/fdinfo/*" && ok "--fastpath: the service holds a tcx link" || bad "--fastpath: the service holds no tcx link (fdinfo) 10 s after the queue was bound"
	packetshaper-rules list | grep -q 'fastpath' && ok "--fastpath: ExecStartPre added the fast path's divert rule" || bad "--fastpath: no fast path divert rule: $(packetshaper-rules list)"
	/out/psend recv --listen 127.0.0.1:9000 --duration 30s --idle 2s >/out/recv-fp.json 2>/out/recv-fp.err &
	rpid=$!
	waitfor 5 grep -q listening /out/recv-fp.err || bad "psend recv does not listen"
	/out/psend send --dst 127.0.0.1:9000 --flows 4 --sport 10000 --pps 500 --duration 2s >/out/send-fp.json 2>/out/send-fp.err || bad "psend send failed: $(cat /out/send-fp.err)"
	wait "$rpid" || bad "psend recv failed: $(cat /out/recv-fp.err)"
	sent=$(grep -o '"sent":[0-9]*' /out/send-fp.json | tail -1 | cut -d: -f2)
	recv=$(grep -o '"total":[0-9]*' /out/recv-fp.json | cut -d: -f2)
	[ "${recv:-0}" -ge 738 ] && [ "${recv:-0}" -le 902 ] && ok "--fastpath: received $recv of $sent: 820 ±10 %, limited in the kernel" || bad "--fastpath: received ${recv:-nothing} of ${sent:-?}: want 820 ±10 %"
else
	bad "packetshaper.service with --fastpath lo did not stay up"
	journalctl -u packetshaper.service --no-pager | tail -3
fi
systemctl stop packetshaper.service || bad "systemctl stop (--fastpath)"
fs=$(journalctl -u packetshaper.service --no-pager | grep 'msg="final stats"' | tail -1)
grep -q ' accepted=0 dropped=0 ' <<<"$fs" && grep -q 'rule.udp9000.packets=[1-9]' <<<"$fs" && ok "--fastpath: the queue decided nothing, the kernel counted the rule's packets" || bad "--fastpath: final stats: $fs"
journalctl -u packetshaper.service --no-pager | grep -q 'fast path off' && bad "--fastpath: the fast path was off: $(journalctl -u packetshaper.service --no-pager | grep 'fast path off' | tail -1)"
sed -i 's|^RULES_OPTS=.*|RULES_OPTS="--proto udp --dport 9000 --family ipv4"|; s|--fastpath lo --fastpath-required ||' /etc/default/packetshaper

# The maintainer scripts with systemd running.
[ -f /out/packetshaper.deb ] || { echo "no package given: maintainer scripts not tested"; finish; }
systemctl enable --now packetshaper.service 2>/dev/null || bad "systemctl enable --now"
waitfor 10 bound || bad "queue 0 not bound after enable --now"
dpkg -r packetshaper >/out/dpkg-r.log 2>&1 || bad "dpkg -r: $(cat /out/dpkg-r.log)"
systemctl is-active -q packetshaper.service && bad "still active after dpkg -r" || ok "dpkg -r stopped the service"
bound && bad "queue 0 still bound after dpkg -r" || ok "dpkg -r: queue unbound"
[ -z "$(packetshaper-rules list 2>/dev/null)" ] || bad "rules left after dpkg -r"
[ -z "$(find /etc/systemd/system -name 'packetshaper*')" ] && ok "dpkg -r: no enablement link left" || bad "links left after dpkg -r: $(find /etc/systemd/system -name 'packetshaper*')"
ls=$(systemctl show -p LoadState --value packetshaper.service)
[ "$ls" = not-found ] && ok "dpkg -r: systemd forgot the unit" || bad "after dpkg -r the unit is $ls, want not-found"
dpkg -i /out/packetshaper.deb >/out/dpkg-i.log 2>&1 || bad "dpkg -i: $(cat /out/dpkg-i.log)"
ls=$(systemctl show -p LoadState --value packetshaper.service)
[ "$ls" = loaded ] && ok "dpkg -i: systemd sees the unit" || bad "after dpkg -i the unit is $ls, want loaded"
st=$(systemctl is-enabled packetshaper.service 2>/dev/null; systemctl is-active packetshaper.service 2>/dev/null)
[ "$(echo $st)" = "disabled inactive" ] && ok "dpkg -i: neither enabled nor started" || bad "after dpkg -i: $(echo $st), want disabled inactive"
systemctl start packetshaper.service || bad "systemctl start after dpkg -i"
waitfor 10 bound || bad "queue 0 not bound after dpkg -i and start"
pid=$(mainpid)
dpkg -i /out/packetshaper.deb >/out/dpkg-i2.log 2>&1 || bad "dpkg -i (again): $(cat /out/dpkg-i2.log)"
waitfor 10 sh -c 'p=$(systemctl show -p MainPID --value packetshaper.service); [ "$p" != 0 ] && [ "$p" != '"$pid"' ]' &&
	ok "an upgrade restarted the running service" || bad "the service was not restarted by the upgrade (main pid $(mainpid), was $pid)"
systemctl stop packetshaper.service
finish
INSIDE
chmod 755 "$work/inside.sh"

# ---------------------------------------------------------------- boot
# In a mount namespace of its own: the overlay and its tmpfs vanish with it.
cat >"$work/boot.sh" <<'BOOT'
#!/bin/bash
set -euo pipefail
work=$1
root=$work/root
mkdir -p "$root"
mount -t tmpfs -o size=1g,mode=0755 packetshaper-test "$root"
mkdir -p "$root/upper" "$root/work" "$root/merged"
# lowerdir=/ holds the root file system only, not what is mounted on it
# (/proc, /sys, /dev, ...): nspawn mounts its own.
mount -t overlay overlay -o "lowerdir=/,upperdir=$root/upper,workdir=$root/work" "$root/merged"
m=$root/merged
cat >"$m/etc/default/packetshaper" <<'EOF'
QUEUE=0
RULES_OPTS="--proto udp --dport 9000 --family ipv4"
PACKETSHAPER_OPTS="--policy /etc/packetshaper/policy.toml --metrics-addr 127.0.0.1:9464 --stats-interval 1s"
EOF
cat >"$m/etc/packetshaper/policy.toml" <<'EOF'
[[rule]]
name  = "udp9000"
match = { proto = ["udp"], dport = ["9000"] }
pps   = 100
burst = 5
EOF
# A machine id of its own (the host's would clash with the journal's).
systemd-id128 new >"$m/etc/machine-id"
exec timeout -k 10 240 systemd-nspawn --quiet -D "$m" --register=no --keep-unit --link-journal=no \
	--private-network --capability=CAP_BPF,CAP_PERFMON --system-call-filter=bpf -M "pstest$$" --bind="$work:/out" -b \
	systemd.run=/out/inside.sh systemd.run_success_action=poweroff systemd.run_failure_action=poweroff \
	systemd.show_status=false
BOOT
chmod 755 "$work/boot.sh"

# nfnetlink_queue and the iptables pieces, loaded here: the container may
# not load modules (modprobe fails in it, then the unit goes on).
for m in nfnetlink_queue xt_NFQUEUE xt_comment; do modprobe -q "$m" 2>/dev/null || true; done

echo "$PROG: booting the container (console: $work/console.log)"
rc=0
unshare --mount --propagation private "$work/boot.sh" "$work" >"$work/console.log" 2>&1 </dev/null || rc=$?
result=$(cat "$work/result" 2>/dev/null || echo "no result: the checks did not run")
if [ "$result" != PASS ]; then
	echo "---- checks (inside.log)"; cat "$work/inside.log" 2>/dev/null || true
	echo "---- journal of packetshaper.service"; cat "$work/journal.txt" 2>/dev/null || true
	echo "---- console (last 40 lines)"; tail -40 "$work/console.log"
	fail "$result (nspawn exit status $rc; files in $work)"
fi
cat "$work/inside.log"
echo "$PROG: packetshaper.service under systemd: PASS"
