#!/usr/bin/env bash
# bench-ab.sh - the engine's Decide at two commits, in one run: is the new
# one at most LIMIT times the old one's cost?
#
#   ./scripts/bench-ab.sh                 # c8c9b35 (before issue 18) against HEAD
#   ./scripts/bench-ab.sh OLD NEW         # any two commits (NEW "." = the work tree)
#   ROUNDS=15 BENCHTIME=2s ./scripts/bench-ab.sh
#
# It builds the shaper package's test binary at each commit (git archive of
# the commit into a temporary directory, go test -c), then runs
# BenchmarkDecide's engine at FLOWS flows (default 10 000) in ROUNDS rounds
# (default 9, at least 9). A round runs the two binaries alternately, PER
# times each (default 3: old, new, old, new, old, new; new first in even
# rounds), and keeps each one's fastest run: load only ever slows a run
# down, so the fastest is the least disturbed, and alternating short runs
# lets load that comes and goes hit both alike. It prints each round's
# ns/op and ratio new/old, then the medians; the verdict is the median of
# the rounds' ratios against LIMIT (default 1.05). Exit status: 0 within
# LIMIT, 1 over it, 2 on a build or run failure.
#
# What a run measures (MODE):
#   cpu   (default) BenchmarkDecide's engine case in CPU time: the script
#         adds BenchmarkABDecideCPU to both trees' tests (the same engine,
#         packets and clock, through the shaper tests' own helpers), which
#         reports the benchmark thread's CPU time per Decide (getrusage
#         RUSAGE_THREAD around the loop) as cpu-ns/op. On a shared machine
#         (load above the core count) wall-clock ns/op counts the time
#         other processes had the CPU, several times the cost; CPU time
#         does not (caches shared with them still cost a little).
#   wall  BenchmarkDecide's own wall-clock ns/op: for a quiet machine.
#
# The default OLD, c8c9b35, is the commit before issue 18's first change
# reached main: git log --first-parent --oneline --grep "issue 18" gives
# the earliest, 0b5dbe4 (Merge branch 'i18-nfq'), and OLD is its first
# parent. The benchmark is found by name in each binary (-test.list):
# BenchmarkDecide, else BENCH_FALLBACK (default BenchmarkEngineDecide), for
# commits where it had another name; its sub-benchmark engine/flows=FLOWS.
#
# Environment (defaults): MODE=cpu ROUNDS=9 PER=3 FLOWS=10000 BENCHTIME=500ms
#   LIMIT=1.05
#   CPU=1 (go test -cpu: GOMAXPROCS of the benchmark) KEEP= (keep the
#   temporary directory) OUT= (also write the rounds to this file)
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=${1:-c8c9b35}
NEW=${2:-HEAD}
ROUNDS=${ROUNDS:-9}
FLOWS=${FLOWS:-10000}
BENCHTIME=${BENCHTIME:-500ms}
PER=${PER:-3}
MODE=${MODE:-cpu}
LIMIT=${LIMIT:-1.05}
CPU=${CPU:-1}
BENCH_FALLBACK=${BENCH_FALLBACK:-BenchmarkEngineDecide}
OUT=${OUT:-}

if [ "$ROUNDS" -lt 9 ]; then
	echo "bench-ab: ROUNDS=$ROUNDS: at least 9 rounds" >&2
	exit 2
fi

TMP=$(mktemp -d /tmp/bench-ab.XXXXXX)
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$TMP"; }
trap cleanup EXIT

# build NAME REV: the shaper test binary of REV ("." = the work tree) as
# $TMP/NAME.test, with BenchmarkABDecideCPU (abBench) added to its tests.
build() {
	local name=$1 rev=$2 src=$TMP/$1
	mkdir -p "$src"
	if [ "$rev" = . ]; then
		(cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -x -C "$src" || return 1
	else
		if ! git -C "$ROOT" rev-parse --verify -q "$rev^{commit}" >/dev/null; then
			echo "bench-ab: $rev: no such commit" >&2
			return 1
		fi
		git -C "$ROOT" archive "$rev" | tar -x -C "$src" || return 1
	fi
	abBench >"$src/shaper/zz_bench_ab_test.go"
	(cd "$src" && go test -c -o "$TMP/$name.test" ./shaper) || return 1
}

# abBench writes BenchmarkABDecideCPU: BenchmarkDecide's engine case (the
# same engine, packets and clock, through the helpers udp, mustNew and t0
# that the shaper's tests have at every commit since BenchmarkDecide was
# written), at AB_FLOWS flows, reporting the benchmark thread's CPU time
# per Decide (getrusage RUSAGE_THREAD around the loop) as cpu-ns/op.
abBench() {
	cat <<'GO'
package shaper

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

func BenchmarkABDecideCPU(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("AB_FLOWS"))
	n = max(n, 1)
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = udp(i, uint16(i), 36)
	}
	e := mustNew(b, Config{Rate: 1e6, Burst: 100, MaxFlows: n})
	now := t0
	for _, p := range pkts {
		e.Decide(p, now)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	c0, iters, i := abThreadCPU(), 0, 0
	for b.Loop() {
		now += 100
		e.Decide(pkts[i], now)
		if i++; i == n {
			i = 0
		}
		iters++
	}
	b.ReportMetric(float64(abThreadCPU()-c0)/float64(iters), "cpu-ns/op")
}

func abThreadCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return ru.Utime.Nano() + ru.Stime.Nano()
}
GO
}

# bench NAME: the benchmark's name in $TMP/NAME.test.
bench() {
	local list
	if [ "$MODE" = cpu ]; then
		echo BenchmarkABDecideCPU
		return 0
	fi
	list=$("$TMP/$1.test" -test.list '^Benchmark') || return 1
	for b in BenchmarkDecide "$BENCH_FALLBACK"; do
		if grep -qx "$b" <<<"$list"; then
			echo "$b"
			return 0
		fi
	done
	echo "bench-ab: $1: neither BenchmarkDecide nor $BENCH_FALLBACK" >&2
	return 1
}

# benchrun NAME UNIT ARGS...: the first value in UNIT (ns/op, cpu-ns/op)
# of one run of NAME's test binary with ARGS.
benchrun() {
	local name=$1 unit=$2 out ns
	shift 2
	out=$(cd "$TMP" && "$TMP/$name.test" -test.run '^$' "$@" \
		-test.benchtime "$BENCHTIME" -test.cpu "$CPU" -test.count 1 2>&1) || { echo "$out" >&2; return 1; }
	ns=$(awk -v unit="$unit" '/^Benchmark/ { for (i = 2; i < NF; i++) if ($(i+1) == unit) { print $i; exit } }' <<<"$out")
	if [ -z "$ns" ]; then
		echo "bench-ab: $name: no $unit in:" >&2
		echo "$out" >&2
		return 1
	fi
	echo "$ns"
}

# wallrun NAME BENCH: the benchmark's ns/op of one run.
wallrun() { benchrun "$1" ns/op -test.bench "^$2\$/^engine/flows=$FLOWS\$"; }

# cpurun NAME BENCH: the CPU ns per Decide of one run (BENCHTIME).
cpurun() { AB_FLOWS=$FLOWS benchrun "$1" cpu-ns/op -test.bench "^$2\$"; }

# run NAME BENCH: ns/op of one run, as MODE measures it.
run() {
	case $MODE in
	cpu) cpurun "$@" ;;
	wall) wallrun "$@" ;;
	*)
		echo "bench-ab: MODE=$MODE: cpu or wall" >&2
		return 1
		;;
	esac
}

oldrev=$(git -C "$ROOT" rev-parse --short "$OLD" 2>/dev/null || echo "$OLD")
newrev=$([ "$NEW" = . ] && echo "work tree" || git -C "$ROOT" rev-parse --short "$NEW" 2>/dev/null || echo "$NEW")
what=$([ "$MODE" = cpu ] && echo "${BENCHTIME}: the thread's CPU ns per Decide" || echo "${BENCHTIME}: wall-clock ns/op")
echo "bench-ab: old $oldrev, new $newrev; MODE=$MODE: $ROUNDS rounds of $PER runs each of $what (the fastest kept) at $FLOWS flows, -cpu $CPU; $(go version | cut -d' ' -f3); load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
build old "$OLD" || exit 2
build new "$NEW" || exit 2
bold=$(bench old) || exit 2
bnew=$(bench new) || exit 2
if [ "$MODE" = cpu ]; then
	echo "bench-ab: both run BenchmarkABDecideCPU (BenchmarkDecide's engine/flows=$FLOWS case, in CPU time)"
else
	echo "bench-ab: old runs $bold/engine/flows=$FLOWS, new runs $bnew/engine/flows=$FLOWS"
fi

# lesser A B: the smaller number.
lesser() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }'; }

ratios=() olds=() news=()
for ((r = 1; r <= ROUNDS; r++)); do
	o= n=
	for ((k = 1; k <= PER; k++)); do
		if ((r % 2)); then
			x=$(run old "$bold") || exit 2
			y=$(run new "$bnew") || exit 2
			order="old,new"
		else
			y=$(run new "$bnew") || exit 2
			x=$(run old "$bold") || exit 2
			order="new,old"
		fi
		o=$(lesser "$x" "$o") n=$(lesser "$y" "$n")
	done
	ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.3f", n / o }')
	olds+=("$o") news+=("$n") ratios+=("$ratio")
	line=$(printf 'round %2d (%s x%d): old %8.2f ns/op  new %8.2f ns/op  new/old %s  load %s' "$r" "$order" "$PER" "$o" "$n" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)")
	echo "$line"
	[ -z "$OUT" ] || echo "$line" >>"$OUT"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mr=$(median "${ratios[@]}")
mo=$(median "${olds[@]}")
mn=$(median "${news[@]}")
verdict=$(awk -v r="$mr" -v l="$LIMIT" 'BEGIN { print (r <= l) ? "within" : "OVER" }')
summary="bench-ab: median old $mo ns/op, new $mn ns/op; median of the rounds' new/old $mr ($verdict the limit $LIMIT); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$summary"
[ -z "$OUT" ] || echo "$summary" >>"$OUT"
[ "$verdict" = within ]
