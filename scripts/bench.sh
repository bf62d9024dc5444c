#!/usr/bin/env bash
# bench.sh - packetshaper's benchmarks in one run, printed as one report:
#
#   engine  go test -bench Decide ./shaper: ns/op per flow count, the engine
#           beside an x/time/rate + map baseline (median of ENGINE_COUNT runs)
#   replay  scripts/bench-replay.sh: packetshaper replay beside
#           tcpdump -r FILE -w /dev/null on the same capture
#   live    packets/s delivered through NFQUEUE by packetshaper, beside the
#           kernel with no queue rule, a minimal C consumer, a naive
#           go-nfqueue consumer and iptables hashlimit, plus verdict latency
#           (root: network namespaces, NFQUEUE)
#   queues  one queue against two (--queue 0-1) at the same offered rates,
#           with RPS on the receiving veth and --queue-balance 0:1
#           --queue-cpu-fanout (root; see "Two queues" below)
#   moderate  consumer CPU per packet at fixed offered rates (small batches)
#           and at full speed: packetshaper beside the C consumer, each
#           timed exactly (root; see "Moderate load" below)
#   shape   shaping (issue 9), end to end in namespaces: one TCP transfer
#           (iperf3) through --bitrate 20mbit --shape --max-delay 50ms, tc
#           tbf rate 20mbit and the policer; UDP at 500 packets/s through
#           --pps 100 --shape --max-delay 1s (arrivals, gaps, delays,
#           departure lateness; default and --rt-priority 1); a reload
#           with packets held; SIGTERM and SIGKILL with packets held; and
#           the kernel's cost of verdicts by id against the packets held
#           (root; PS_STRICT_TIMING=1 go test ./e2e -run '^TestShape': the
#           tests' timing figures enforced, see internal/timing; and ./nfq
#           -bench 'HeldVerdicts|KernelListWalk'; about 3 minutes)
#   global  a global rule's Decide beside the same rule run locally, in one
#           run (go test -bench DecideGlobal ./shaper: leases that never run
#           dry; ./internal/global: leases from a real redis-server through the
#           refresher), and the store's load: Redis commands/s from one host
#           with 10, 1 000 and 100 000 active keys (go test -bench RedisLoad
#           ./internal/global; needs redis-server, which the tests start themselves on
#           loopback ports)
#   timing  the timing figures that go test reports but does not enforce
#           (internal/timing), enforced: every test that checks one
#           (go run ./scripts/timingtests lists them: nfq's wake, idle,
#           hold and stop times, internal/global's fallback and return,
#           internal/daemon's idle listing, policy's refusal of a huge file,
#           cmd/packetshaper's live run, and in e2e the flood rate, the
#           listing's latency, the store's return, shaping lateness and
#           each shaper's exit after SIGTERM) runs with PS_STRICT_TIMING=1,
#           one at a time; each figure is reported ("ok" or its test
#           fails) with the load average before and after each package
#           (root for nfq, cmd and e2e, which skip otherwise; about 12
#           minutes)
#   fastpath  the kernel fast path's bars (issue 20), scripts/bench-fastpath.sh:
#           on nfqbench's namespaces, 64-byte packets, FLOWS flows, one run
#           interleaving the kernel with no queue rule, iptables hashlimit,
#           packetshaper through NFQUEUE and packetshaper --fastpath (tcx
#           ingress) with the same limit rule (token bucket per 5-tuple,
#           hashlimit's rate), the fast path accepting every packet and the
#           fast path without its divert rule (diagnostics, not bars);
#           packets/s decided and delivered, delivered / expected, CPU per
#           packet of all cores, and the bars with their ratios (root; about
#           2 minutes at REPS=3)
#
#   sudo ./scripts/bench.sh                       # all nine, about 27-32 minutes
#   sudo PARTS=queues ./scripts/bench.sh          # two queues only, about 1.5 minutes
#   sudo PARTS=moderate ./scripts/bench.sh        # CPU per packet only, about 3 minutes
#   sudo PARTS=shape ./scripts/bench.sh           # shaping only, about 3 minutes
#   sudo PARTS=fastpath ./scripts/bench.sh        # the fast path's bars, about 2 minutes
#   sudo REPS=5 ./scripts/bench.sh
#   PARTS=engine,replay ./scripts/bench.sh        # no root needed
#   PARTS=global ./scripts/bench.sh               # no root needed (redis-server installed)
#   sudo PARTS=timing ./scripts/bench.sh          # the tests' timing figures, enforced
#
# It drives the reference harness ../shared/nfqbench/run.sh (NFQBENCH=path to
# change it), which creates its own namespaces, sends 64-byte UDP from a
# bounded C sender pinned to core 0 and counts what passes every INPUT chain
# of the receiving namespace. The repetitions are interleaved (rep 1 of every
# case, then rep 2, ...) so that background load hits all cases alike; the
# table gives the median of REPS runs per case and ratios computed from
# those medians, i.e. within this run.
#
# Cases
#   base        kernel, no queue rule
#   c_per       minimal C consumer, libnetfilter_queue, one verdict per packet
#   go          naive go-nfqueue v2.1.0 consumer, one SetVerdict per packet
#   ps_accept   packetshaper --pps 1e9 (accepts everything), FLOWS flows
#   ps_limited  packetshaper --pps LIMITED_PPS with LIMITED_FLOWS flows: every
#               flow under its limit, but every packet decided by the shaper
#   hashlimit   iptables hashlimit 100/s burst 5 per 5-tuple (in the kernel)
#   ps_latency  packetshaper accept-all with --latency, offered half of the
#               ps_accept median: verdict latency p50/p99/max (µs) from the
#               kernel's receive timestamp to the verdict, as it logs them
#   ps_latency_rt  the same with --rt-priority 1 (SCHED_FIFO), interleaved
#               with ps_latency (only if the binary has that flag)
#
# Two queues (PARTS=queues)
#   The kernel's --queue-balance hashes only addresses and protocol, so the
#   harness's single address pair would land on one queue. The queue cases
#   therefore run packetshaper through a small wrapper (written to OUT/bin)
#   that, inside the receiving namespace and before packetshaper binds, sets
#   RPS on the receiving veth (rx-0/rps_cpus = all CPUs; the RPS hash includes
#   the ports, so each flow stays on one CPU) and, for two queues, replaces
#   run.sh's rule with
#     -p udp --dport 9000 -j NFQUEUE --queue-balance 0:1 --queue-cpu-fanout --queue-bypass
#   so the queue is the CPU that received the packet. Both cases get RPS and
#   the same CPUs (CONSUMER_CPUS=QUEUE_CPUS); the sender stays on core 0.
#   q1 = --queue 0 (run.sh's --queue-num 0 rule), q2 = --queue 0-1, each at
#   every rate of QUEUE_RATES (0 = as fast as the sender can), interleaved.
#   Reported: delivered pps, delivered / sent, packetshaper's per_queue=
#   split, consumer CPU, CPU busy per core, and the CPU seconds and last core
#   of packetshaper's two busiest threads (from /proc/PID/task/*/stat, read by
#   the wrapper when it is stopped).
#
# Moderate load (PARTS=moderate)
#   At each rate of MODERATE_RATES (0 = as fast as the sender can), the C
#   consumer of run.sh (nfq_accept -m per, libnetfilter_queue, one verdict
#   per packet) and packetshaper (accept-all, as ps_accept), interleaved.
#   run.sh's own CPU figure comes from clock ticks rounded to whole percent
#   (2 µs/pkt at 5000 pps), so each consumer runs under a wrapper (written
#   to OUT/bin) that takes its exact CPU time from wait4 (user + system)
#   minus what it had used when its queue was bound (its start-up); divided
#   by the packets it says it answered. MODERATE_BEFORE=BINARY adds a third
#   consumer, another packetshaper build (e.g. an older commit), run the
#   same way.
#
# Only packets that went through the consumer count: every consumer runs
# fail-closed (packetshaper with --fail-closed), so a full queue drops instead
# of bypassing, and "via consumer" (the queue's id_sequence, or the consumer's
# own packets= count) is shown beside "delivered".
#
# Environment (defaults): PARTS=engine,replay,live,queues,moderate,shape,global,timing,fastpath
#   engine: ENGINE_COUNT=3 (go test -count)
#   replay: REPLAY_PACKETS=1000000 REPLAY_FLOWS=10000 REPLAY_RUNS=3
#   live:   REPS=3 DUR=2.5 FLOWS=1000 LIMITED_FLOWS=10000 LIMITED_PPS=1000
#           SIZE=64 PS_ARGS="" (extra packetshaper flags for the ps_ cases)
#   queues: QUEUE_RATES="150000 200000 300000 0" QUEUE_CPUS=0,1 (and REPS, DUR,
#           FLOWS, SIZE, PS_ARGS as above)
#   moderate: MODERATE_RATES="5000 20000 50000 0" MODERATE_DUR=4
#           MODERATE_BEFORE="" (and REPS, FLOWS, SIZE, PS_ARGS as above)
#   global: ENGINE_COUNT as for engine
#   fastpath: LIMIT_RATE=100 LIMIT_BURST=50 (the limit per 5-tuple, of
#           hashlimit and of the policy; see scripts/bench-fastpath.sh), and
#           REPS, DUR, FLOWS, SIZE as above
#   OUT=/tmp/packetshaper-bench/<time> (report: OUT/bench.md)
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
NFQBENCH=${NFQBENCH:-$ROOT/../shared/nfqbench/run.sh}
REPS=${REPS:-3}
DUR=${DUR:-2.5}
FLOWS=${FLOWS:-1000}
LIMITED_FLOWS=${LIMITED_FLOWS:-10000}
LIMITED_PPS=${LIMITED_PPS:-1000}
SIZE=${SIZE:-64}
PS_ARGS=${PS_ARGS:-}
OUT=${OUT:-/tmp/packetshaper-bench/$(date +%Y%m%d-%H%M%S)}
PARTS=${PARTS:-engine,replay,live,queues,moderate,shape,global,timing,fastpath}
QUEUE_RATES=${QUEUE_RATES:-150000 200000 300000 0}
QUEUE_CPUS=${QUEUE_CPUS:-0,1}
MODERATE_RATES=${MODERATE_RATES:-5000 20000 50000 0}
MODERATE_DUR=${MODERATE_DUR:-4}
MODERATE_BEFORE=${MODERATE_BEFORE:-}
ENGINE_COUNT=${ENGINE_COUNT:-3}
REPLAY_PACKETS=${REPLAY_PACKETS:-1000000}
REPLAY_FLOWS=${REPLAY_FLOWS:-10000}
REPLAY_RUNS=${REPLAY_RUNS:-3}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

die() { echo "bench.sh: $*" >&2; exit 1; }
log() { echo "[bench] $*" >&2; }

case "${1:-}" in -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;; '') ;; *) die "no arguments (see --help); settings are environment variables" ;; esac
# between VAR LO HI: LO <= $VAR <= HI (VAR already checked to be a number)
between() { [ "${!1}" -ge "$2" ] && [ "${!1}" -le "$3" ]; }
want() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
for p in ${PARTS//,/ }; do
	case "$p" in engine | replay | live | queues | moderate | shape | global | timing | fastpath) ;; *) die "PARTS=$PARTS: unknown part '$p' (want a comma list of engine, replay, live, queues, moderate, shape, global, timing, fastpath)" ;; esac
done
[ -n "${PARTS//,/}" ] || die "PARTS is empty (want a comma list of engine, replay, live, queues, moderate, shape, global, timing, fastpath)"
if want live || want queues || want moderate || want fastpath; then
	[ "$(id -u)" = 0 ] || die "the live, queues, moderate and fastpath parts must run as root (network namespaces, NFQUEUE, tcx); PARTS=engine,replay runs without it"
	[ -x "$NFQBENCH" ] || [ -f "$NFQBENCH" ] || die "reference harness not found at $NFQBENCH (set NFQBENCH=.../run.sh, or PARTS=engine,replay)"
fi
if want replay; then
	command -v tcpdump >/dev/null || die "the replay part needs tcpdump (apt-get install tcpdump), or leave it out of PARTS"
fi
if want shape; then
	[ "$(id -u)" = 0 ] || die "the shape part must run as root (network namespaces, NFQUEUE)"
	command -v iperf3 >/dev/null || die "the shape part needs iperf3 (apt-get install iperf3), or leave it out of PARTS"
	command -v tc >/dev/null || die "the shape part needs tc (apt-get install iproute2)"
fi
if want global; then
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
		die "the global part needs redis-server (apt-get install redis-server redis-tools), or leave it out of PARTS"
fi
for v in REPS FLOWS LIMITED_FLOWS LIMITED_PPS SIZE ENGINE_COUNT REPLAY_PACKETS REPLAY_FLOWS REPLAY_RUNS; do
	case "${!v}" in '' | *[!0-9]*) die "$v='${!v}': want a whole number" ;; esac
done
between REPS 1 20 || die "REPS=$REPS: want 1..20"
[ "$LIMITED_FLOWS" -le 55535 ] || die "LIMITED_FLOWS=$LIMITED_FLOWS: the sender's source ports allow 55535"
between ENGINE_COUNT 1 10 || die "ENGINE_COUNT=$ENGINE_COUNT: want 1..10"
between REPLAY_RUNS 1 10 || die "REPLAY_RUNS=$REPLAY_RUNS: want 1..10"
between REPLAY_PACKETS 1000 20000000 || die "REPLAY_PACKETS=$REPLAY_PACKETS: want 1000..20000000"
if want queues; then
	[ -n "${QUEUE_RATES// /}" ] || die "QUEUE_RATES is empty (want packets/s values, 0 = as fast as possible)"
	for r in $QUEUE_RATES; do
		case "$r" in *[!0-9]*) die "QUEUE_RATES='$QUEUE_RATES': '$r' is not a whole number of packets/s" ;; esac
		[ "$r" -le 10000000 ] || die "QUEUE_RATES: $r packets/s is more than 10000000"
	done
	case "$QUEUE_CPUS" in '' | *[!0-9,-]*) die "QUEUE_CPUS='$QUEUE_CPUS': want a taskset CPU list such as 0,1" ;; esac
	[ "$(nproc)" -ge 2 ] || die "the queues part needs at least 2 CPUs (this machine has $(nproc))"
	# RPS mask of QUEUE_CPUS (CPUs below 32; checked here, not by run.sh).
	mask=0
	for c in ${QUEUE_CPUS//,/ }; do
		lo=${c%-*} hi=${c#*-}
		if ! [[ $c =~ ^[0-9]+(-[0-9]+)?$ ]] || [ "$lo" -gt "$hi" ] || [ "$hi" -ge "$(nproc)" ] || [ "$hi" -ge 32 ]; then
			die "QUEUE_CPUS=$QUEUE_CPUS: '$c' is not a CPU (or range) of this machine below 32"
		fi
		for ((i = lo; i <= hi; i++)); do mask=$((mask | (1 << i))); done
	done
	mask=$(printf '%x' "$mask")
fi

if want moderate; then
	[ -n "${MODERATE_RATES// /}" ] || die "MODERATE_RATES is empty (want packets/s values, 0 = as fast as possible)"
	for r in $MODERATE_RATES; do
		case "$r" in *[!0-9]*) die "MODERATE_RATES='$MODERATE_RATES': '$r' is not a whole number of packets/s" ;; esac
		[ "$r" -le 10000000 ] || die "MODERATE_RATES: $r packets/s is more than 10000000"
	done
	case "$MODERATE_DUR" in '' | *[!0-9]*) die "MODERATE_DUR='$MODERATE_DUR': want a whole number of seconds" ;; esac
	between MODERATE_DUR 1 60 || die "MODERATE_DUR=$MODERATE_DUR: want 1..60"
	if [ -n "$MODERATE_BEFORE" ]; then
		[ -x "$MODERATE_BEFORE" ] || die "MODERATE_BEFORE=$MODERATE_BEFORE: not an executable"
		MODERATE_BEFORE=$(cd "$(dirname "$MODERATE_BEFORE")" && pwd)/$(basename "$MODERATE_BEFORE")
	fi
fi

mkdir -p "$OUT" || die "cannot create $OUT"
t0=$SECONDS
: >"$OUT/bench.md"

# ---------------------------------------------------------------- engine
if want engine; then
	log "engine: go test -bench Decide ./shaper, -count $ENGINE_COUNT"
	(cd "$ROOT" && timeout 900 go test -run '^$' -bench 'Decide' -benchmem -count "$ENGINE_COUNT" -timeout 14m ./shaper) \
		>"$OUT/engine.txt" 2>&1 || { tail -20 "$OUT/engine.txt" >&2; die "engine benchmark failed (log: $OUT/engine.txt)"; }
	awk -v count="$ENGINE_COUNT" '
	/^BenchmarkDecide\// {
		split($1, p, "/"); impl=p[2]; f=p[3]; sub(/^flows=/, "", f); sub(/-[0-9]+$/, "", f)
		for (i=2;i<=NF;i++) { if ($(i+1)=="ns/op") ns=$i; if ($(i+1)=="allocs/op") al=$i }
		k=impl SUBSEP f; n[k]++; v[k,n[k]]=ns; allocs[k]=(al>allocs[k] ? al : allocs[k]+0)
		if (!(f in seen)) { seen[f]=1; order[++nf]=f }
	}
	function med(k,   m,i,j,t,a) { m=n[k]; for(i=1;i<=m;i++) a[i]=v[k,i]
		for(i=2;i<=m;i++){t=a[i]; for(j=i-1;j>=1 && a[j]>t;j--) a[j+1]=a[j]; a[j+1]=t}
		return (m%2) ? a[(m+1)/2] : (a[m/2]+a[m/2+1])/2 }
	END {
		if (!nf) { print "engine: no BenchmarkDecide lines in the output"; exit 1 }
		printf "## Engine: Decide per packet (median of %d runs)\n\n", count
		print "| flows | engine ns/op | allocs/op | x/time/rate + map ns/op | allocs/op | engine / baseline |"
		print "|---:|---:|---:|---:|---:|---:|"
		for (i=1;i<=nf;i++) { f=order[i]; e="engine" SUBSEP f; x="xrate-map" SUBSEP f
			me=(n[e] ? med(e) : 0); mx=(n[x] ? med(x) : 0)
			printf "| %s | **%.1f** | %s | %.1f | %s | %s |\n", f, me, allocs[e]+0, mx, allocs[x]+0, (mx>0 ? sprintf("%.2f", me/mx) : "-") }
		print ""
		print "targets (issue 5): <= 100 ns at 10 000 flows, <= 250 ns at 1 000 000, 0 allocs/op, ahead of the baseline (ratio < 1)"
	}' "$OUT/engine.txt" >>"$OUT/bench.md" || die "cannot read the engine benchmark output ($OUT/engine.txt)"
	echo >>"$OUT/bench.md"
fi

# ---------------------------------------------------------------- replay
if want replay; then
	log "replay: scripts/bench-replay.sh $REPLAY_PACKETS $REPLAY_FLOWS $REPLAY_RUNS"
	timeout 900 "$HERE/bench-replay.sh" "$REPLAY_PACKETS" "$REPLAY_FLOWS" "$REPLAY_RUNS" >"$OUT/replay.txt" 2>&1 ||
		{ tail -20 "$OUT/replay.txt" >&2; die "replay benchmark failed (log: $OUT/replay.txt)"; }
	{
		printf "## Replay: one core, capture in the page cache (best of %d runs)\n\n" "$REPLAY_RUNS"
		sed -n '/^capture:/,$p' "$OUT/replay.txt" | sed 's/^/    /'
		echo
		echo "targets (issue 5): >= 3 000 000 packets/s, and at least half the speed of tcpdump (time ratio <= 2)"
		echo
	} >>"$OUT/bench.md"
fi

# ---------------------------------------------------------------- shape
if want shape; then
	log "shape: go test ./e2e -run '^TestShape' -v, then go test ./nfq -bench 'HeldVerdicts|KernelListWalk'"
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	(cd "$ROOT" && PS_STRICT_TIMING=1 timeout 900 go test ./e2e -run '^TestShape' -count=1 -v -timeout 14m) >"$OUT/shape.txt" 2>&1
	shape_rc=$?
	(cd "$ROOT" && timeout 600 go test ./nfq -run '^$' -bench 'HeldVerdicts|KernelListWalk' -benchtime 20000x -count 1 -timeout 9m) >"$OUT/held.txt" 2>&1 ||
		{ tail -20 "$OUT/held.txt" >&2; die "the held-verdicts benchmark failed (log: $OUT/held.txt)"; }
	{
		printf "## Shaping: end to end (PS_STRICT_TIMING=1 go test ./e2e -run '^TestShape' -v; load average before: %s, after: %s)

" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
		grep -E '^ *(shape|harness)_test\.go:[0-9]+: |^ *--- (PASS|FAIL)' "$OUT/shape.txt" | sed -E 's/^ *(shape|harness)_test\.go:[0-9]+: /    /; s/^ *(--- )/  \1/'
		[ "$shape_rc" = 0 ] || echo "    (go test exit status $shape_rc: see $OUT/shape.txt)"
		echo
		echo "## Shaping: the kernel's cost of verdicts by id with packets held (go test ./nfq -bench 'HeldVerdicts|KernelListWalk')"
		echo
		grep -E '^Benchmark' "$OUT/held.txt" | sed 's/^/    /'
		echo
		echo "HeldVerdicts: N packets held at the head of the kernel's queue, then packets answered one by one by id; write_ns/verdict is the verdict write per packet."
		echo "KernelListWalk: the walk from the queue's head to the newest packet that kernels without nfnetlink_queue's hash table make per verdict by id, emulated in user space."
		echo
	} >>"$OUT/bench.md"
fi
# ---------------------------------------------------------------- global
if want global; then
	log "global: go test -bench DecideGlobal ./shaper and DecideGlobalRedis ./internal/global, -count $ENGINE_COUNT"
	(cd "$ROOT" && timeout 900 go test -run '^$' -bench 'DecideGlobal$' -benchmem -count "$ENGINE_COUNT" ./shaper &&
		timeout 900 go test -run '^$' -bench 'DecideGlobalRedis' -benchmem -count "$ENGINE_COUNT" ./internal/global) \
		>"$OUT/global-engine.txt" 2>&1 || { tail -20 "$OUT/global-engine.txt" >&2; die "global engine benchmark failed (log: $OUT/global-engine.txt)"; }
	log "global: go test -bench RedisLoad ./internal/global (10, 1 000, 100 000 keys)"
	(cd "$ROOT" && timeout 900 go test -run '^$' -bench 'RedisLoad' -benchtime 1x ./internal/global) \
		>"$OUT/global-load.txt" 2>&1 || { tail -20 "$OUT/global-load.txt" >&2; die "Redis load benchmark failed (log: $OUT/global-load.txt)"; }
	awk -v count="$ENGINE_COUNT" '
	/^BenchmarkDecideGlobal(Redis)?\// {
		split($1, p, "/"); src=(p[1] ~ /Redis/ ? "redis-server" : "leases never dry"); impl=p[2]; f=p[3]; sub(/^flows=/, "", f); sub(/-[0-9]+$/, "", f)
		for (i=2;i<=NF;i++) { if ($(i+1)=="ns/op") ns=$i; if ($(i+1)=="allocs/op") al=$i }
		k=src SUBSEP impl SUBSEP f; n[k]++; v[k,n[k]]=ns; allocs[k]=(al>allocs[k] ? al : allocs[k]+0)
		r=src SUBSEP f; if (!(r in seen)) { seen[r]=1; order[++nr]=r }
	}
	function med(k,   m,i,j,t,a) { m=n[k]; for(i=1;i<=m;i++) a[i]=v[k,i]
		for(i=2;i<=m;i++){t=a[i]; for(j=i-1;j>=1 && a[j]>t;j--) a[j+1]=a[j]; a[j+1]=t}
		return (m%2) ? a[(m+1)/2] : (a[m/2]+a[m/2+1])/2 }
	END {
		if (!nr) { print "global: no BenchmarkDecideGlobal lines in the output"; exit 1 }
		printf "## Global rules: Decide per packet beside the same rule run locally (median of %d runs, one process)\n\n", count
		print "| leases from | flows | local ns/op | global ns/op | global / local | global allocs/op | in fallback ns/op |"
		print "|---|---:|---:|---:|---:|---:|---:|"
		for (i=1;i<=nr;i++) { split(order[i], rf, SUBSEP); src=rf[1]; f=rf[2]
			l=src SUBSEP "local" SUBSEP f; g=src SUBSEP "global" SUBSEP f; fb=src SUBSEP "global-fallback" SUBSEP f
			ml=(n[l] ? med(l) : 0); mg=(n[g] ? med(g) : 0); mf=(n[fb] ? sprintf("%.1f", med(fb)) : "-")
			printf "| %s | %s | %.1f | **%.1f** | %s | %s | %s |\n", src, f, ml, mg, (ml>0 ? sprintf("%.2f", mg/ml) : "-"), allocs[g]+0, mf }
		print ""
	}' "$OUT/global-engine.txt" >>"$OUT/bench.md" || die "cannot read the global engine benchmark output ($OUT/global-engine.txt)"
	awk '
	/^BenchmarkRedisLoad\// {
		split($1, p, "/"); k=p[2]; sub(/^keys=/, "", k); sub(/-[0-9]+$/, "", k)
		delete m; for (i=2;i<NF;i++) if ($(i+1) ~ /^[a-z%\/-]+$/) m[$(i+1)]=$i
		row[++nr]=sprintf("| %s | **%.0f** | %.0f | %.0f %% | %.0f | %.0f | %.3f | %d |", k, m["cmds/s"], m["store-cmds/s"], m["store-cpu%"], m["offered/s"], m["accepted/s"], m["cmds/accepted"], m["errors"])
	}
	END {
		if (!nr) { print "global: no BenchmarkRedisLoad lines in the output"; exit 1 }
		print "## Global rules: the store'"'"'s load from one host (each key offered 5 packets/s, limit 100/s, global-slack 0.1; 5 s)\n"
		print "| active keys | commands/s (one per ask) | store commands/s (the scripts'"'"' own calls included) | store CPU | offered packets/s | accepted packets/s | commands per accepted packet | errors |"
		print "|---:|---:|---:|---:|---:|---:|---:|---:|"
		for (i=1;i<=nr;i++) print row[i]
		print ""
	}' "$OUT/global-load.txt" >>"$OUT/bench.md" || die "cannot read the Redis load benchmark output ($OUT/global-load.txt)"
fi

# ---------------------------------------------------------------- timing
# The tests whose figures go test checks with timing.Check (reported, not
# enforced there), with PS_STRICT_TIMING=1: a figure over its bound fails
# its test here, and each figure within its bound is logged "timing: ...:
# ok". The list is derived from the tests (go run ./scripts/timingtests:
# every test that reaches timing.Check, directly or through a helper), so
# a test that gains a check is enforced here without a list to keep. Each
# package runs alone, its tests one at a time (-parallel 1).
if want timing; then
	{
		echo "## Timing figures of the tests, enforced (PS_STRICT_TIMING=1 go test -v; see internal/timing)"
		echo
	} >>"$OUT/bench.md"
	specs=$(cd "$ROOT" && go run ./scripts/timingtests) || die "go run ./scripts/timingtests failed"
	while read -r pkg tests; do
		name=$(echo "$pkg" | tr -c 'A-Za-z0-9\n' _)
		log "timing: PS_STRICT_TIMING=1 go test $pkg ($(echo "$tests" | tr '|' '\n' | wc -l) tests)"
		la0=$(cut -d' ' -f1-3 /proc/loadavg)
		(cd "$ROOT" && PS_STRICT_TIMING=1 timeout 1500 go test "$pkg" -run "^($tests)\$" -count=1 -p 1 -parallel 1 -v -timeout 24m) >"$OUT/timing$name.txt" 2>&1
		rc=$?
		{
			printf "%s: %s tests (load average before: %s, after: %s)\n\n" "$pkg" "$(echo "$tests" | tr '|' '\n' | wc -l)" "$la0" "$(cut -d' ' -f1-3 /proc/loadavg)"
			# Each figure enforced (the test's name is the one of the
			# === RUN line before it), and each failure.
			awk '/^=== (RUN|CONT) /{t=$3} / timing: /{sub(/^ */, ""); print "    " t ": " $0} /^ *--- FAIL/{sub(/^ */, ""); print "    " $0}' "$OUT/timing$name.txt"
			[ "$rc" = 0 ] || echo "    (go test exit status $rc: see $OUT/timing$name.txt)"
			echo
		} >>"$OUT/bench.md"
	done <<<"$specs"
fi

# ---------------------------------------------------------------- fastpath
if want fastpath; then
	log "fastpath: scripts/bench-fastpath.sh (REPS=$REPS DUR=$DUR FLOWS=$FLOWS SIZE=$SIZE)"
	mkdir -p "$OUT/fastpath"
	{
		printf "## Kernel fast path: the bars of issue 20 (scripts/bench-fastpath.sh, median of %d runs)\n\n" "$REPS"
		REPS=$REPS DUR=$DUR FLOWS=$FLOWS SIZE=$SIZE BIN=$OUT/bin NFQBENCH=$NFQBENCH timeout 900 "$HERE/bench-fastpath.sh" "$OUT/fastpath" 2>"$OUT/fastpath/log.txt" ||
			{ tail -20 "$OUT/fastpath/log.txt" >&2; die "the fastpath part failed (log: $OUT/fastpath/log.txt)"; }
		echo
	} >>"$OUT/bench.md"
fi

# finish: the machine and the command under the report, then print it.
finish() {
	{
		echo "$(date -u +%FT%TZ), kernel $(uname -r), $(nproc) CPUs, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
		echo "command: PARTS=$PARTS ./scripts/bench.sh (REPS=$REPS DUR=$DUR); $(cd "$ROOT" && git log -1 --format='commit %h %s' 2>/dev/null)"
	} >>"$OUT/bench.md"
	cat "$OUT/bench.md"
	log "done in $((SECONDS - t0)) s (report: $OUT/bench.md)"
	exit 0
}
want live || want queues || want moderate || finish

# ---------------------------------------------------------------- live setup
ID=$(printf '%04x' $((RANDOM % 65536)))
# run.sh insists on namespace names starting with nb-; ours are unique so
# that parallel runs (and other users of run.sh) do not collide.
export NS_A=nb-psb$ID-a NS_B=nb-psb$ID-b VETH_A=nbp${ID}a VETH_B=nbp${ID}b
export BIN=$OUT/bin DUR SIZES=$SIZE
trap 'ip netns del "$NS_A" 2>/dev/null; ip netns del "$NS_B" 2>/dev/null; exit 130' INT TERM

log "building packetshaper"
mkdir -p "$BIN"
(cd "$ROOT" && go build -o "$BIN/packetshaper" ./cmd/packetshaper) || die "go build ./cmd/packetshaper failed"
PS="$BIN/packetshaper --queue 0 --fail-closed --max-flows $((LIMITED_FLOWS * 2)) $PS_ARGS"
# ps_latency_rt: the same with --rt-priority 1 (SCHED_FIFO), when the binary
# has the flag.
RT=
if "$BIN/packetshaper" --help 2>&1 | grep -q -- '-rt-priority'; then RT=1; fi

# run LABEL FLOWS CASES [CONSUMER]: one repetition of CASES via run.sh;
# its rows go to $OUT/LABEL-rN/runs.csv.
run() {
	local label=$1 flows=$2 cases=$3 consumer=${4:-} dir
	dir=${RUN_DIR:-$OUT}/$label-r$rep
	log "rep $rep/$REPS: $label ($cases, $flows flows${RUN_PPS:+, offered $RUN_PPS pps})"
	if [ -n "$consumer" ]; then
		PPS=${RUN_PPS:-0} CONSUMER_CPUS=${RUN_CPUS:-1} CONSUMER="$consumer" FLOWS=$flows REPS=1 CASES="$cases" OUT=$dir bash "$NFQBENCH" one >"$dir.log" 2>&1
	else
		PPS=${RUN_PPS:-0} CONSUMER_CPUS=${RUN_CPUS:-1} FLOWS=$flows REPS=1 CASES="$cases" OUT=$dir bash "$NFQBENCH" all >"$dir.log" 2>&1
	fi || { tail -20 "$dir.log" >&2; die "run.sh failed for $label (log: $dir.log)"; }
	grep -E '^\[nfqbench\] (ERROR|consumer)' "$dir.log" >&2
	return 0
}

# ---------------------------------------------------------------- live
if want live; then
	for rep in $(seq "$REPS"); do
		run builtin "$FLOWS" "base c_per go hashlimit"
		run ps_accept "$FLOWS" custom "$PS --pps 1000000000 --burst 1000000000"
		run ps_limited "$LIMITED_FLOWS" custom "$PS --pps $LIMITED_PPS --burst $LIMITED_PPS"
	done

	# Verdict latency at half the accept-all load just measured.
	RUN_PPS=$(cat "$OUT"/ps_accept-r*/runs.csv | awk -F, '$1=="custom" && $9>0 {print $9}' | sort -n |
		awk '{a[NR]=$1} END {if (NR) printf "%d", a[int((NR+1)/2)]/2}')
	if [ -n "$RUN_PPS" ] && [ "$RUN_PPS" -gt 0 ]; then
		for rep in $(seq "$REPS"); do
			run ps_latency "$FLOWS" custom "$PS --pps 1000000000 --burst 1000000000 --latency"
			if [ -n "$RT" ]; then
				run ps_latency_rt "$FLOWS" custom "$PS --pps 1000000000 --burst 1000000000 --latency --rt-priority 1"
			fi
		done
	fi

	# ---------------------------------------------------------------- table
	# Merge the rows, naming the custom ones after their label.
	{
		head -1 "$OUT/builtin-r1/runs.csv"
		for f in "$OUT"/*-r*/runs.csv; do
			label=$(basename "$(dirname "$f")")
			label=${label%-r*}
			tail -n +2 "$f" | awk -F, -v OFS=, -v l="$label" '$1=="custom"{$1=l} {print}'
		done
	} >"$OUT/runs.csv"

	printf "## Live: packets/s through NFQUEUE (median of %d runs)\n\n" "$REPS" >>"$OUT/bench.md"
	awk -F, -v reps="$REPS" '
	NR==1 {next}
	$5=="ERR" {err[$1]++; next}
	{
		k=$1; n[k]++; i=n[k]
		flows[k]=$3; dp[k,i]=$9; sp[k,i]=$7; exp_r[k,i]=($10>0 ? $8/$10 : 0)
		# packets that went through the consumer: its own count, else id_sequence
		via = ($12!="" ? $12 : $13)
		vq[k,i] = ($8>0 && via!="" && !($12=="" && $13==0) ? via/$8 : -1)
		cpp[k,i] = (via>0 ? ($16/100.0)*$6*1e6/via : 0)
		qd[k,i] = ($5>0 ? $14/$5 : 0)
		bg[k,i] = $19
	}
	function med(a,k,m,   i,j,t,v) { for(i=1;i<=m;i++) v[i]=a[k,i]
		for(i=2;i<=m;i++){t=v[i]; for(j=i-1;j>=1 && v[j]>t;j--) v[j+1]=v[j]; v[j+1]=t}
		return (m%2) ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
	function mn(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]<r) r=a[k,i]; return r}
	function mx(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]>r) r=a[k,i]; return r}
	function ratio(k, ref) { return (ref in M && M[ref]>0 && k!="hashlimit" && k !~ /^ps_latency/) ? sprintf("%.2f", M[k]/M[ref]) : "-" }
	END {
		no=split("base c_per go ps_accept ps_limited hashlimit ps_latency ps_latency_rt", order, " ")
		for (o=1;o<=no;o++) { k=order[o]; if (n[k]) M[k]=med(dp,k,n[k]) }
		print "| case | flows | delivered pps: **median** (min–max) | sent pps | delivered / expected | via consumer | queue-full drops | consumer µs/pkt | × base | × c_per | × go | bg load % |"
		print "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for (o=1;o<=no;o++) { k=order[o]; m=n[k]
			if (!m) { if (err[k]) printf "| %s | | ERROR (%d runs) | | | | | | | | | |\n", k, err[k]; continue }
			v=med(vq,k,m); c=med(cpp,k,m); q=med(qd,k,m)
			printf "| %s | %s | **%.0f** (%.0f–%.0f) | %.0f | %.1f%% | %s | %s | %s | %s | %s | %s | %.0f |\n",
				k, flows[k], M[k], mn(dp,k,m), mx(dp,k,m), med(sp,k,m), 100*med(exp_r,k,m),
				(v>=0 ? sprintf("%.0f%%", 100*v) : "-"), (q>0 ? sprintf("%.0f%%", 100*q) : "-"),
				(c>0 ? sprintf("%.1f", c) : "-"), ratio(k,"base"), ratio(k,"c_per"), ratio(k,"go"), med(bg,k,m)
			if (m < reps) short = short " " k "(" m "/" reps ")"
		}
		if (short != "") print "\nfewer runs than asked for:" short
	}' "$OUT/runs.csv" >>"$OUT/bench.md"

	# Latency: the final stats lines of the ps_latency consumers.
	for label in ps_latency ps_latency_rt; do
		ls "$OUT/$label"-r*/logs/*.consumer.log >/dev/null 2>&1 || continue
		cat "$OUT/$label"-r*/logs/*.consumer.log | grep 'final stats' | awk -v pps="$RUN_PPS" -v label="$label" '
		function kv(k,  m) { return match($0, k "=[0-9.]+") ? substr($0, RSTART+length(k)+1, RLENGTH-length(k)-1) : "" }
		function med(a,m,   i,j,t) { for(i=2;i<=m;i++){t=a[i]; for(j=i-1;j>=1 && a[j]>t;j--) a[j+1]=a[j]; a[j+1]=t}
			return (m%2) ? a[(m+1)/2] : (a[m/2]+a[m/2+1])/2 }
		kv("lat_p99_us") != "" { n++; p50[n]=kv("lat_p50_us")+0; p99[n]=kv("lat_p99_us")+0; mx[n]=kv("lat_max_us")+0; all=all (n>1 ? ", " : "") p99[n] }
		END {
			if (!n) { print "\n" label ": no lat_ fields in the final stats lines"; exit }
			printf "\n%s: verdict latency at %d pps offered (half the ps_accept median), median of %d runs: p50 %s µs, **p99 %s µs**, max %s µs (p99 per run: %s)\n",
				label, pps, n, med(p50,n), med(p99,n), med(mx,n), all
		}' >>"$OUT/bench.md"
	done

	{
		echo
		echo "REPS=$REPS DUR=$DUR s SIZE=$SIZE B FLOWS=$FLOWS LIMITED_FLOWS=$LIMITED_FLOWS LIMITED_PPS=$LIMITED_PPS; sender pinned to core 0, consumers to core 1 (run.sh defaults)"
		echo "packetshaper: $PS ...; raw rows: $OUT/runs.csv"
		echo
	} >>"$OUT/bench.md"
fi

# ---------------------------------------------------------------- queues
if want queues; then
	WRAP=$BIN/rps-wrap.sh
	cat >"$WRAP" <<-'EOF'
		#!/bin/sh
		# rps-wrap.sh VETH MASK BALANCE CMD...: written by scripts/bench.sh and run
		# by run.sh as the consumer, inside the receiving namespace. It sets RPS on
		# VETH to MASK, for BALANCE=N:M replaces run.sh's NFQUEUE rule by one with
		# --queue-balance N:M --queue-cpu-fanout (BALANCE=-: keeps it), runs CMD in
		# its own session, and when stopped logs the CPU ticks and last core of
		# CMD's two busiest threads before passing the signal on.
		set -u
		veth=$1 mask=$2 balance=$3
		shift 3
		rps=/sys/class/net/$veth/queues/rx-0/rps_cpus
		echo "$mask" >"$rps" || { echo "rps-wrap: cannot write $rps" >&2; exit 1; }
		if [ "$balance" != - ]; then
			iptables -F INPUT && iptables -A INPUT -p udp --dport 9000 -j NFQUEUE \
				--queue-balance "$balance" --queue-cpu-fanout --queue-bypass ||
				{ echo "rps-wrap: cannot add the --queue-balance rule" >&2; exit 1; }
		fi
		echo "rps-wrap: rps_cpus=$(cat "$rps") rule: $(iptables -S INPUT | grep NFQUEUE)" >&2
		setsid "$@" &
		pid=$!
		threads() {
			for f in /proc/"$pid"/task/*/stat; do sed 's/^.*) //' "$f"; done 2>/dev/null |
				awk '{print $12+$13, $37}' | sort -rn | head -2 | awk '{printf "%s%s@%s", (NR>1 ? ";" : ""), $1, $2}'
		}
		trap 'echo "rps-wrap: threads=$(threads) hz=$(getconf CLK_TCK)" >&2; kill -TERM "$pid" 2>/dev/null' TERM INT
		wait "$pid"
		rc=$?
		if [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then wait "$pid"; rc=$?; fi
		exit "$rc"
	EOF
	PSQ="$BIN/packetshaper --fail-closed --max-flows $((FLOWS * 2 + 1024)) --pps 1000000000 --burst 1000000000 $PS_ARGS"
	QDIR=$OUT/queues
	mkdir -p "$QDIR"
	RUN_DIR=$QDIR RUN_CPUS=$QUEUE_CPUS
	for rep in $(seq "$REPS"); do
		for rate in $QUEUE_RATES; do
			RUN_PPS=$rate
			q1=(run "q1-$rate" "$FLOWS" custom "sh $WRAP $VETH_B $mask - $PSQ --queue 0")
			q2=(run "q2-$rate" "$FLOWS" custom "sh $WRAP $VETH_B $mask 0:1 $PSQ --queue 0-1")
			# alternate which goes first, so that a drift in background load
			# does not always favour the same one
			if [ $((rep % 2)) = 1 ]; then "${q1[@]}" && "${q2[@]}"; else "${q2[@]}" && "${q1[@]}"; fi
		done
	done
	unset RUN_DIR RUN_CPUS RUN_PPS

	# One row per run: run.sh's row (case = label) + per_queue + threads.
	{
		echo "label,size,flows,rep,sent,secs,sent_pps,delivered,delivered_pps,expected,udp_layer,consumer_pkts,queued,queue_drops,user_drops,consumer_cpu_pct,cpu_busy_per_core,softirq_pct,bg_busy_pct,blast_stime,per_queue,threads"
		for d in "$QDIR"/q*-r*/; do
			label=$(basename "$d")
			label=${label%-r*}
			clog=$(find "$d/logs" -name '*.consumer.log' | head -1)
			pq=$(grep 'final stats' "$clog" | sed -n 's/.*per_queue=\([0-9:,]*\).*/\1/p')
			th=$(sed -n 's/.*rps-wrap: threads=\([^ ]*\) hz=.*/\1/p' "$clog")
			grep -q 'rps-wrap: rps_cpus=' "$clog" || die "the RPS wrapper did not run in $d (log: $clog)"
			tail -n +2 "$d/runs.csv" | awk -F, -v OFS=, -v l="$label" -v pq="${pq//,/;}" -v th="$th" '{$1=l; print $0, pq, th}'
		done
	} >"$QDIR/runs.csv"

	{
	printf "## Live, two queues: --queue 0 against --queue 0-1 at the same offered rate (median of %d runs)\n\n" "$REPS"
	awk -F, -v rates="$QUEUE_RATES" -v hz="$(getconf CLK_TCK)" -v reps="$REPS" '
	NR==1 {next}
	$5=="ERR" {err[$1]++; next}
	{
		k=$1; n[k]++; i=n[k]
		dp[k,i]=$9; sp[k,i]=$7; ds[k,i]=($5>0 ? $8/$5 : 0); cc[k,i]=$16; si[k,i]=$18; bg[k,i]=$19
		vc[k,i]=($8>0 && $12!="" ? $12/$8 : -1)
		cpp[k,i]=($12>0 ? ($16/100.0)*$6*1e6/$12 : 0)
		nc=split($17, pc, "/"); if (nc>ncpu) ncpu=nc
		for (j=1;j<=nc;j++) core[k "#" j,i]=pc[j]
		if ($21!="") { split($21, q, ";"); split(q[1], a, ":"); split(q[2], b, ":")
			share[k,i]=(a[2]+b[2]>0 ? b[2]/(a[2]+b[2]) : 0); hasq[k]=1 }
		split($22, t, ";"); split(t[1], t1, "@"); split(t[2], t2, "@")
		th1[k,i]=t1[1]/hz; th2[k,i]=t2[1]/hz; cores[k]=cores[k] (i>1 ? ", " : "") t1[2] "+" t2[2]
	}
	function med(a,k,m,   i,j,t,v) { for(i=1;i<=m;i++) v[i]=a[k,i]
		for(i=2;i<=m;i++){t=v[i]; for(j=i-1;j>=1 && v[j]>t;j--) v[j+1]=v[j]; v[j+1]=t}
		return (m%2) ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
	function mn(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]<r) r=a[k,i]; return r}
	function mx(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]>r) r=a[k,i]; return r}
	function percore(k,m,  j,r){ r=""; for(j=1;j<=ncpu;j++) r=r (j>1 ? " / " : "") med(core,k "#" j,m); return r }
	END {
		print "| queues | offered pps | sent pps | delivered pps: **median** (min–max) | delivered / sent | two / one queue | queue 0 / queue 1 | via consumer | consumer CPU % | µs/pkt | CPU busy % per core | softirq % | busiest two threads, CPU s | their last cores per run | bg load % |"
		print "|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|---:|---|---|---:|"
		nr=split(rates, R, " ")
		for (r=1;r<=nr;r++) for (qq=1;qq<=2;qq++) {
			k="q" qq "-" R[r]; m=n[k]
			if (!m) { printf "| %d | %s | | ERROR (%d runs) | | | | | | | | | | | |\n", qq, (R[r]>0 ? R[r] : "max"), err[k]; continue }
			M=med(dp,k,m); o="q1-" R[r]
			ratio=(qq==2 && n[o] ? sprintf("**%.2f**", M/med(dp,o,n[o])) : "-")
			s=(hasq[k] ? sprintf("%.0f %% / %.0f %%", 100*(1-med(share,k,m)), 100*med(share,k,m)) : "-")
			v=med(vc,k,m)
			printf "| %d | %s | %.0f | **%.0f** (%.0f–%.0f) | %.1f%% | %s | %s | %s | %.0f | %.1f | %s | %.0f | %.2f + %.2f | %s | %.0f |\n",
				qq, (R[r]>0 ? R[r] : "max"), med(sp,k,m), M, mn(dp,k,m), mx(dp,k,m), 100*med(ds,k,m), ratio, s,
				(v>=0 ? sprintf("%.0f%%", 100*v) : "-"), med(cc,k,m), med(cpp,k,m), percore(k,m), med(si,k,m),
				med(th1,k,m), med(th2,k,m), cores[k], med(bg,k,m)
			if (m < reps) short=short " " k "(" m ")"
		}
		if (short != "") print "\nfewer runs than asked for:" short
	}' "$QDIR/runs.csv"
		echo
		echo "RPS on the receiving veth: rps_cpus=$mask; two queues: --queue-balance 0:1 --queue-cpu-fanout --queue-bypass; consumers on CPUs $QUEUE_CPUS, sender on core 0"
		echo "REPS=$REPS DUR=$DUR s SIZE=$SIZE B FLOWS=$FLOWS QUEUE_RATES=\"$QUEUE_RATES\" (max = as fast as the sender can); packetshaper: $PSQ --queue 0 | --queue 0-1"
		echo "raw rows: $QDIR/runs.csv"
		echo
	} >>"$OUT/bench.md"
fi

# ---------------------------------------------------------------- moderate
if want moderate; then
	CWRAP=$BIN/cpu-wrap.sh
	cat >"$CWRAP" <<-'EOF'
		#!/bin/bash
		# cpu-wrap.sh QUEUE CMD...: written by scripts/bench.sh and run by run.sh
		# as the consumer, inside the receiving namespace. It runs CMD, notes the
		# CPU time CMD has used when queue QUEUE is bound (its start-up), passes
		# TERM and INT on, and when CMD has exited logs its CPU time since then:
		# user + system from wait4 (bash's times), exact, unlike clock ticks.
		# (In a few runs in a hundred times saw nothing of the child; then the
		# CPU time its threads had when the TERM came, from schedstat, is used.)
		set -u
		queue=$1
		shift
		"$@" &
		pid=$!
		# cputime: CPU time of CMD's threads so far in µs, builtins only
		cputime() {
			local f ns rest sum=0
			for f in /proc/"$pid"/task/*/schedstat; do
				read -r ns rest <"$f" 2>/dev/null && sum=$((sum + ns))
			done
			echo $((sum / 1000))
		}
		atterm=0
		trap 'atterm=$(cputime); kill -TERM "$pid" 2>/dev/null' TERM INT
		startup=
		for _ in $(seq 400); do
			if awk -v q="$queue" '$1==q{f=1} END{exit !f}' /proc/net/netfilter/nfnetlink_queue 2>/dev/null; then
				startup=$(cputime)
				break
			fi
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.025
		done
		wait "$pid"
		rc=$?
		while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
		# The second line of times: user and system time of the waited-for
		# children. Into a file: in a pipe or $(...) it would be a subshell's.
		tf=${0%/*}/cpu-wrap.$$.times
		times >"$tf"
		total=$(awk 'NR==2 {n=split($1 " " $2, t, " "); for (i=1;i<=n;i++) { split(t[i], a, /[ms]/); us+=(a[1]*60+a[2])*1e6 } printf "%d", us}' "$tf")
		rm -f "$tf"
		[ "${total:-0}" -gt "$atterm" ] || total=$atterm
		echo "cpu-wrap: startup_us=${startup:-?} cpu_us=$((total - ${startup:-0}))" >&2
		exit "$rc"
	EOF
	MDIR=$OUT/moderate
	mkdir -p "$MDIR"
	C_CONS="$BIN/nfq_accept -q 0 -m per -t $((MODERATE_DUR + 40))"
	PS_M="$PS --pps 1000000000 --burst 1000000000 --stats-interval 0"
	labels="c_per packetshaper"
	[ -n "$MODERATE_BEFORE" ] && labels="$labels before"
	# run.sh builds nfq_accept on its first run; build it now for C_CONS.
	BIN=$BIN bash "$NFQBENCH" build >"$MDIR/build.log" 2>&1 || { tail -20 "$MDIR/build.log" >&2; die "run.sh build failed (log: $MDIR/build.log)"; }
	RUN_DIR=$MDIR
	for rep in $(seq "$REPS"); do
		for rate in $MODERATE_RATES; do
			RUN_PPS=$rate
			for l in $labels; do
				case $l in
				c_per) cons=$C_CONS ;;
				packetshaper) cons=$PS_M ;;
				before) cons="$MODERATE_BEFORE ${PS_M#"$BIN/packetshaper "}" ;;
				esac
				DUR=$MODERATE_DUR run "$l-$rate" "$FLOWS" custom "bash $CWRAP 0 $cons"
			done
		done
	done
	unset RUN_DIR RUN_PPS

	# One row per run: label, rate, run.sh's row, and from the consumer's log
	# its packets (C: packets=, packetshaper: final stats packets=), batches
	# and exact CPU.
	{
		echo "label,rate,sent_pps,delivered_pps,secs,consumer_pkts,batches,cpu_us,tick_cpu_pct,bg_busy_pct"
		for d in "$MDIR"/*-r*/; do
			label=$(basename "$d")
			label=${label%-r*}
			clog=$(find "$d/logs" -name '*.consumer.log' | head -1)
			line=$(grep -E '^packets=|final stats' "$clog" | tail -1)
			pk=$(sed -n 's/.*\bpackets=\([0-9]*\).*/\1/p' <<<"$line")
			bt=$(sed -n 's/.*\bbatches=\([0-9]*\).*/\1/p' <<<"$line")
			cu=$(sed -n 's/.*cpu-wrap: startup_us=[0-9?]* cpu_us=\([0-9-]*\).*/\1/p' "$clog" | tail -1)
			tail -n +2 "$d/runs.csv" | awk -F, -v OFS=, -v l="${label%-*}" -v r="${label##*-}" -v pk="$pk" -v bt="$bt" -v cu="$cu" \
				'$5!="ERR" {print l, r, $7, $9, $6, pk, bt, cu, $16, $19}'
		done
	} >"$MDIR/runs.csv"

	{
	printf "## Moderate load: consumer CPU per packet at fixed offered rates (median of %d runs)\n\n" "$REPS"
	awk -F, -v rates="$MODERATE_RATES" -v labels="$labels" -v reps="$REPS" '
	NR==1 {next}
	$6>0 && $8>0 {
		k=$1 SUBSEP $2; n[k]++; i=n[k]
		us[k,i]=$8/$6; dp[k,i]=$4; sp[k,i]=$3; bg[k,i]=$10
		tk[k,i]=($10!="" ? ($9/100.0)*$5*1e6/$6 : 0)
		if ($7>0) { pb[k,i]=$6/$7; hasb[k]=1 }
	}
	function med(a,k,m,   i,j,t,v) { for(i=1;i<=m;i++) v[i]=a[k,i]
		for(i=2;i<=m;i++){t=v[i]; for(j=i-1;j>=1 && v[j]>t;j--) v[j+1]=v[j]; v[j+1]=t}
		return (m%2) ? v[(m+1)/2] : (v[m/2]+v[m/2+1])/2 }
	function mn(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]<r) r=a[k,i]; return r}
	function mx(a,k,m,  i,r){r=a[k,1]; for(i=2;i<=m;i++) if(a[k,i]>r) r=a[k,i]; return r}
	function cell(l,r,  k,m) { k=l SUBSEP r; m=n[k]; if (!m) return "ERROR"
		return sprintf("**%.2f** (%.2f–%.2f)", med(us,k,m), mn(us,k,m), mx(us,k,m)) }
	END {
		nl=split(labels, L, " "); before=(nl>2)
		printf "| offered pps | C (c_per) µs/pkt: **median** (min–max) | packetshaper µs/pkt | packetshaper / C |"
		if (before) printf " before µs/pkt | before / C |"
		print " delivered pps C / packetshaper | packetshaper packets per batch | run.sh tick µs/pkt C / packetshaper | bg load % |"
		printf "|---:|---|---|---:|"; if (before) printf "---|---:|"; print "---|---:|---|---:|"
		nr=split(rates, R, " ")
		for (r=1;r<=nr;r++) { rt=R[r]; c="c_per" SUBSEP rt; p="packetshaper" SUBSEP rt; b="before" SUBSEP rt
			mc=(n[c] ? med(us,c,n[c]) : 0); mp=(n[p] ? med(us,p,n[p]) : 0); mb=(n[b] ? med(us,b,n[b]) : 0)
			printf "| %s | %s | %s | %s |", (rt>0 ? rt : "max"), cell("c_per",rt), cell("packetshaper",rt), (mc>0 && mp>0 ? sprintf("**%.2f**", mp/mc) : "-")
			if (before) printf " %s | %s |", cell("before",rt), (mc>0 && mb>0 ? sprintf("%.2f", mb/mc) : "-")
			printf " %.0f / %.0f | %s | %s / %s | %.0f |\n", (n[c] ? med(dp,c,n[c]) : 0), (n[p] ? med(dp,p,n[p]) : 0),
				(hasb[p] ? sprintf("%.1f", med(pb,p,n[p])) : "-"),
				(n[c] ? sprintf("%.1f", med(tk,c,n[c])) : "-"), (n[p] ? sprintf("%.1f", med(tk,p,n[p])) : "-"),
				(n[p] ? med(bg,p,n[p]) : 0)
			for (l=1;l<=nl;l++) { k=L[l] SUBSEP rt; if (n[k] < reps) short=short " " L[l] "@" rt "(" n[k]+0 ")" }
		}
		if (short != "") print "\nfewer runs than asked for:" short
		print "\ntarget: packetshaper / C <= 1 at 20000 pps"
	}' "$MDIR/runs.csv"
		echo
		echo "µs/pkt: the consumer's CPU time (user + system, from wait4, after its start-up) / the packets it answered; the run.sh column is its clock-tick figure, rounded to whole percent of a core."
		echo "REPS=$REPS MODERATE_DUR=$MODERATE_DUR s SIZE=$SIZE B FLOWS=$FLOWS MODERATE_RATES=\"$MODERATE_RATES\" (max = as fast as the sender can); sender on core 0, consumer on core 1"
		echo "C: $C_CONS; packetshaper: $PS_M${MODERATE_BEFORE:+; before: $MODERATE_BEFORE}"
		echo "raw rows: $MDIR/runs.csv"
		echo
	} >>"$OUT/bench.md"
fi

finish
