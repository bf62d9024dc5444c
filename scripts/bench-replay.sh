#!/usr/bin/env bash
# bench-replay.sh: replay throughput of packetshaper on one core, next to
# tcpdump reading and writing the same file.
#
#   scripts/bench-replay.sh [PACKETS [FLOWS [RUNS]]]     default 1000000 10000 5
#
# It generates a capture of PACKETS small UDP packets (60-260 byte frames)
# over FLOWS flows with scripts/gentestdata into a temporary directory
# (removed on exit), reads it once so it sits in the page cache, then runs,
# RUNS times each and pinned to CPU 0 (taskset) with GOMAXPROCS=1:
#
#   packetshaper replay --pps 100 FILE        (summary output)
#   tcpdump -r FILE -w /dev/null              (libpcap read + write, no decoding)
#
# and prints the best wall time and packets/s of each, and their ratio
# (scripts/bench.sh runs it as its replay part).
# The machine may be shared and noisy: compare the two columns of one run,
# not numbers from different runs.
set -euo pipefail

packets=${1:-1000000}
flows=${2:-10000}
runs=${3:-5}

cd "$(dirname "$0")/.."
command -v tcpdump >/dev/null || { echo "bench-replay: tcpdump not found (apt-get install tcpdump)" >&2; exit 1; }
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)

tmp=$(mktemp -d /tmp/bench-replay.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/packetshaper" ./cmd/packetshaper
go run ./scripts/gentestdata -big "$packets" -flows "$flows" -out "$tmp"
file=$tmp/bench.pcap
cat "$file" >/dev/null # into the page cache
size=$(stat -c %s "$file")
echo "capture: $packets packets, $flows flows, $((size / 1024 / 1024)) MiB, $file"

# best_of CMD...: the smallest wall time in seconds over $runs runs.
best_of() {
	local best="" t0 t1 dt
	for _ in $(seq "$runs"); do
		t0=$(date +%s%N)
		GOMAXPROCS=1 "${pin[@]}" "$@" >/dev/null 2>&1 || { echo "bench-replay: failed: $*" >&2; exit 1; }
		t1=$(date +%s%N)
		dt=$((t1 - t0))
		if [[ -z $best || $dt -lt $best ]]; then best=$dt; fi
	done
	echo "$best"
}

ps_ns=$(best_of "$tmp/packetshaper" replay --pps 100 "$file")
td_ns=$(best_of tcpdump -r "$file" -w /dev/null)

awk -v p="$packets" -v a="$ps_ns" -v b="$td_ns" 'BEGIN {
	printf "%-40s %10s %14s\n", "", "best s", "packets/s"
	printf "%-40s %10.3f %14.0f\n", "packetshaper replay --pps 100", a / 1e9, p / (a / 1e9)
	printf "%-40s %10.3f %14.0f\n", "tcpdump -r FILE -w /dev/null", b / 1e9, p / (b / 1e9)
	printf "packetshaper takes %.2fx the time of tcpdump (its speed is %.2fx tcpdump\x27s)\n", a / b, b / a
}'
