#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine, as root:
#
#   sudo ./scripts/test.sh
#
# Installs what the tests need with apt-get (only what is missing), then runs
# every stage, each to its end even when another failed:
#
#   vet      go vet (one check)
#   unit     go test of every package but e2e and those of the race stage:
#            unit, property, golden, fuzz seed corpora, the replay report in
#            headless Chromium, the packages' own tests of the real kernel
#            (netns, NFQUEUE); and, of the race stage's packages, only the
#            tests that mean nothing under the race detector (RACELESS: the
#            peak-RSS tests, replay's memory-bound streams, global's
#            TestLeasesThreeHosts), run plainly
#   e2e      the end-to-end tests: the real binary against the real kernel in
#            network namespaces they create (those that mostly wait five at
#            a time, see e2e/parallel_test.go); then, as one check,
#            scripts/newcomer-test.sh: a new user's traps (units, the
#            package's own configuration, policing TCP, replay's clock,
#            --help, fail-open under iperf3 TCP)
#   race     go test -race over every package with goroutines or shared
#            state (go statements, sync, sync/atomic; found by this script,
#            so that a new one is covered; e2e aside: the binary it runs is
#            built without the race detector): all their tests, run once,
#            here (the tests of RACELESS skip, saying so)
#
# Each test runs once: a package of the race stage is not run again in the
# unit stage (the race detector runs the same tests, with the same
# assertions, and more checks). With TEST_STAGES=unit alone (no race stage)
# the unit stage runs every package plainly.
#   package  scripts/package-test.sh (one check): the systemd unit's
#            exposure, the .deb built, installed, run by systemd in a
#            container, removed and purged; beside the fuzz stage when both
#            run (it mostly waits for dpkg and systemd, and each fuzz target
#            runs for a fixed time whatever the CPU it gets), its output
#            printed after that stage's
#   fuzz     each fuzz target for FUZZTIME (one test each; 5 s: the
#            seed corpora ran in the unit or race stage, this is new
#            inputs' search, two workers, every target)
#
# While vet and unit run, the race and fuzz stages' packages are compiled
# in the background at idle priority (see prebuild below); the e2e stage
# starts once that is done.
#
# Tests that need root (netns, NFQUEUE, the package) skip as another user,
# and say so. Every test's outcome is read from go test -json by
# scripts/testsum, which ends the run with a summary: per stage and in
# total the tests passed, failed and skipped (subtests and fuzz targets
# counted) and the wall time (each stage's; the run's in total: the
# package stage overlaps the fuzz stage), every skipped test with its reason (its t.Skip message), every
# failure, and as the last line "N passed, N failed, N skipped". Exits
# non-zero when anything failed. The go test -json output of each stage is
# kept in a directory it names.
#
# Timing figures (latency, lateness, throughput, how long a stop took) are
# reported, not enforced, here: scripts/bench.sh enforces them
# (PS_STRICT_TIMING=1, see internal/timing) beside the machine's load.
#
# For development, a subset (environment; defaults in brackets):
#   TEST_STAGES  the stages to run, comma-separated [vet,unit,e2e,race,package,fuzz]
#   TEST_PKGS    the packages for vet, unit, race and fuzz, e2e only if it is
#                among them [./...]
#   TEST_RUN     go test -run for unit, e2e and race [all tests]
#   FUZZTIME     how long each fuzz target runs; 0: each listed as skipped [5s]
# e.g. TEST_STAGES=unit,race TEST_PKGS=./policy TEST_RUN=TestMatch ./scripts/test.sh
# (with TEST_RUN the RACELESS tests are not run plainly: only its matches run)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
# The tests have the machine to themselves here (one package at a time):
# those whose counts need that (the serial e2e tests, a stalled queue's
# timing) run; plain go test ./... skips them, saying so
# (internal/testutil.NeedExclusive).
export PS_TEST_EXCLUSIVE=1

# chromium (and a font for it): TestReportInBrowser opens replay --report's page.
# redis-server: the global rules' tests start their own stores on loopback.
# iperf3: TestShapeTCP runs one TCP transfer through the shaper.
# clang llvm libbpf-dev: bpf2go's clang and llvm-strip and <bpf/bpf_helpers.h>
# (<linux/*.h> is libc6-dev's linux-libc-dev): TestGeneratedUpToDate
# regenerates the fast path's object and fails on drift (it skips without clang).
need=(iproute2 iptables nftables man-db iputils-ping tcpdump netcat-openbsd kmod ca-certificates gcc libc6-dev hping3 iperf3 systemd systemd-container procps git chromium fonts-dejavu-core redis-server redis-tools clang llvm libbpf-dev bpftool jq)
if [ "$(id -u)" = 0 ]; then
	missing=()
	for p in "${need[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "test.sh: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		# A freshly booted machine's apt-daily may hold the dpkg lock: wait.
		apt-get -o DPkg::Lock::Timeout=600 update -qq
		apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	# NFQUEUE and hashlimit live in modules on most kernels; load them if
	# this kernel has them as modules (built in is fine too).
	for m in nfnetlink_queue xt_NFQUEUE nft_queue xt_hashlimit; do modprobe -q "$m" 2>/dev/null || true; done
else
	echo "test.sh: not root: not installing packages; tests that need root (netns, NFQUEUE) will skip"
fi

command -v go >/dev/null || { echo "test.sh: go not found (expected at /usr/local/go/bin)" >&2; exit 1; }
go version

STAGES=${TEST_STAGES:-vet,unit,e2e,race,package,fuzz}
FUZZTIME=${FUZZTIME:-5s}
for st in ${STAGES//,/ }; do
	case "$st" in vet | unit | e2e | race | package | fuzz) ;; *)
		echo "test.sh: TEST_STAGES=$STAGES: unknown stage '$st' (want a comma list of vet, unit, e2e, race, package, fuzz)" >&2
		exit 2
		;;
	esac
done
[ -n "${STAGES//,/}" ] || { echo "test.sh: TEST_STAGES is empty" >&2; exit 2; }
stage_on() { case ",$STAGES," in *",$1,"*) return 0 ;; esac; return 1; }

OUT=$(mktemp -d /tmp/packetshaper-test.XXXXXX) || exit 1
TS=$OUT/testsum
go build -o "$TS" ./scripts/testsum || { echo "test.sh: cannot build scripts/testsum: no summary possible" >&2; exit 1; }
echo "test.sh: stages $STAGES; go test -json output in $OUT"

# The packages: all, or TEST_PKGS; e2e apart (its own stage).
# shellcheck disable=SC2086 # TEST_PKGS is a list of patterns
list=$(go list ${TEST_PKGS:-./...}) || { echo "test.sh: go list ${TEST_PKGS:-./...} failed" >&2; exit 1; }
mapfile -t all <<<"$list"
E2E=github.com/packetshaper/packetshaper/e2e
units=() e2e=()
for p in "${all[@]}"; do
	if [ "$p" = "$E2E" ]; then e2e=("$p"); else units+=("$p"); fi
done
run=()
[ -n "${TEST_RUN:-}" ] && run=(-run "$TEST_RUN")

# The race stage's packages: every package (of those chosen) whose code or
# tests start goroutines or share state: go statements, sync, sync/atomic.
race=()
for p in "${units[@]}"; do
	dir=$(go list -f '{{.Dir}}' "$p")
	if grep -qE '(^|[^[:alnum:]_.])go (func|[[:alnum:]_.]+\()|"sync"|"sync/atomic"' "$dir"/*.go 2>/dev/null; then
		race+=("$p")
	fi
done
# RACELESS: the tests of race-stage packages that skip under the race
# detector, saying why (peak RSS means nothing there; replay's memory-bound
# streams start no goroutine; global's 5 % utilisation figure needs its
# refreshers on time; the fast path's million-packet flood is one
# goroutine, 50 s under -race): the unit stage runs them plainly. One
# "package regexp" a line.
RACELESS='github.com/packetshaper/packetshaper/cmd/packetshaper ^(TestReplayMemory|TestReplayCraftedMemory)$
github.com/packetshaper/packetshaper/replay ^(TestConstantMemory|TestHugeLengthsBounded|TestHeldBytesBounded)$
github.com/packetshaper/packetshaper/internal/global ^TestLeasesThreeHosts$
github.com/packetshaper/packetshaper/internal/fastpath ^(TestFlood|TestFloodPausingFlows)$'
# plain: the packages the unit stage runs whole: all but the race stage's
# when that stage runs too.
plain=("${units[@]}")
if stage_on race; then
	plain=()
	for p in "${units[@]}"; do
		case " ${race[*]} " in *" $p "*) ;; *) plain+=("$p") ;; esac
	done
fi

# gotest STAGE ARGS...: go test -json ARGS, its events into OUT/STAGE.json
# (and its exit status, for the summary), its progress on the terminal.
gotest() {
	local stage=$1
	shift
	go test -json "$@" 2>&1 | tee -a "$OUT/$stage.json" | "$TS" stream
	"$TS" record -exit "${PIPESTATUS[0]}" >>"$OUT/$stage.json"
}
# check STAGE NAME CMD...: one check that is not a Go test, as a test of STAGE.
check() {
	local stage=$1 name=$2
	shift 2
	local log=$OUT/$stage.$(echo "$name" | tr -c 'A-Za-z0-9.\n' _).log
	"$@" 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" = 0 ]; then
		"$TS" record -action pass "$name" >>"$OUT/$stage.json"
	else
		"$TS" record -action fail -reason "exit status $rc: $(grep -v '^\s*$' "$log" | tail -1) (log: $log)" "$name" >>"$OUT/$stage.json"
	fi
}
summary=()
# timed STAGE CMD...: CMD, its wall time recorded as STAGE's (testsum's
# summary shows each stage's and the run's).
timed() {
	local stage=$1 t0=$SECONDS
	shift
	"$@"
	"$TS" record -wall $((SECONDS - t0)) >>"$OUT/$stage.json"
}

# fuzz_pkgs: the packages (of those chosen) with a fuzz target: func
# FuzzX(f *testing.F) in their test files (go test -list would run e2e's
# TestMain).
fuzz_pkgs() {
	local pkg dir
	for pkg in "${all[@]}"; do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		grep -qs '^func Fuzz[A-Za-z0-9_]*(.*\*testing\.F)' "$dir"/*_test.go && echo "$pkg"
	done
}

# prebuild: while vet and unit run (unit's -p 1 leaves a core mostly
# idle), the race stage's packages are compiled with the race detector
# and the fuzz stage's with its instrumentation, in the background at
# idle CPU priority (chrt --idle: any other task runs first), into the
# build cache: those stages then only link their test binaries (a fresh
# clone compiles the module's own packages again: their directory is in
# the cache's key). Nothing else runs beside the e2e stage: it, or the
# race stage, waits for the prebuild first. Its output is in
# OUT/prebuild.log; a failure there costs only time (the stage builds
# again and reports the error).
prebuild() {
	{
		[ ${#race[@]} -gt 0 ] && go test -race -c -o /dev/null "${race[@]}"
		if stage_on fuzz && [ "$FUZZTIME" != 0 ]; then
			for pkg in $(fuzz_pkgs); do go test -c -o /dev/null -fuzz . "$pkg"; done
		fi
		true
	} >"$OUT/prebuild.log" 2>&1
}
prebuild_wait() {
	if [ -n "${prebuild_pid:-}" ]; then
		local t0=$SECONDS
		wait "$prebuild_pid" || true
		prebuild_pid=
		echo "test.sh: waited $((SECONDS - t0))s for the prebuild of the race and fuzz stages (log: $OUT/prebuild.log)"
	fi
}
if { stage_on vet || stage_on unit; } && { stage_on race || stage_on fuzz; }; then
	idle=()
	chrt --idle 0 true 2>/dev/null && idle=(chrt --idle 0)
	"${idle[@]}" nice -n 19 bash -c "$(declare -f prebuild fuzz_pkgs stage_on); $(declare -p race all OUT STAGES FUZZTIME); prebuild" &
	prebuild_pid=$!
fi

if stage_on vet; then
	echo "== vet"
	: >"$OUT/vet.json"
	timed vet check vet "go vet" go vet "${all[@]}"
	summary+=("vet=$OUT/vet.json")
fi

unit_stage() {
	# -p 1: packages side by side on a 2-core machine would disturb the
	# ones that drive the real kernel.
	[ ${#plain[@]} -gt 0 ] && gotest unit -p 1 -count=1 -timeout 20m "${run[@]}" "${plain[@]}"
	if stage_on race && [ -z "${TEST_RUN:-}" ]; then
		mapfile -t raceless <<<"$RACELESS"
		for line in "${raceless[@]}"; do
			pkg=${line%% *} re=${line#* }
			case " ${race[*]} " in *" $pkg "*)
				echo "== unit: $re in ${pkg#github.com/packetshaper/packetshaper/} (they skip under -race)"
				gotest unit -p 1 -count=1 -timeout 20m -run "$re" "$pkg"
				;;
			esac
		done
	fi
}
if stage_on unit; then
	echo "== unit: go test (${#plain[@]} packages; those of the race stage run there)"
	: >"$OUT/unit.json"
	timed unit unit_stage
	summary+=("unit=$OUT/unit.json")
fi

e2e_stage() {
	prebuild_wait
	if [ ${#e2e[@]} -gt 0 ]; then
		echo "== e2e: go test ./e2e"
		# The tests marked parallel (e2e/parallel_test.go: mostly
		# waiting, asserting counts) run five at a time (its
		# defaultParallel), after the others ran alone.
		gotest e2e -p 1 -count=1 -timeout 40m "${run[@]}" "${e2e[@]}"
		if [ -z "${TEST_RUN:-}" ]; then
			echo "== e2e: a newcomer's traps (scripts/newcomer-test.sh)"
			# Its live traps are e2e tests this stage just ran (and
			# counted): not run a second time.
			check e2e scripts/newcomer-test.sh env NEWCOMER_LIVE_RAN="go test ./e2e above" timeout 900 ./scripts/newcomer-test.sh
		fi
	else
		echo "== e2e: not among TEST_PKGS=$TEST_PKGS"
	fi
}
if stage_on e2e; then
	: >"$OUT/e2e.json"
	timed e2e e2e_stage
	summary+=("e2e=$OUT/e2e.json")
fi

if stage_on race; then
	echo "== race: go test -race over ${race[*]#github.com/packetshaper/packetshaper/}"
	: >"$OUT/race.json"
	race_stage() {
		prebuild_wait
		[ ${#race[@]} -gt 0 ] && gotest race -race -p 1 -count=1 -timeout 20m "${run[@]}" "${race[@]}"
	}
	timed race race_stage
	summary+=("race=$OUT/race.json")
fi

if stage_on package; then
	echo "== package: the systemd unit and the Debian package (scripts/package-test.sh)"
	: >"$OUT/package.json"
	if [ "$(id -u)" = 0 ] && stage_on fuzz; then
		echo "(beside the fuzz stage; its output follows that stage's)"
		timed package check package scripts/package-test.sh ./scripts/package-test.sh >"$OUT/package.out" 2>&1 &
		package_pid=$!
	elif [ "$(id -u)" = 0 ]; then
		timed package check package scripts/package-test.sh ./scripts/package-test.sh
	else
		"$TS" record -action skip -reason "not root: it installs the package and boots a container" scripts/package-test.sh >>"$OUT/package.json"
	fi
	summary+=("package=$OUT/package.json")
fi

# fuzz PKG TARGET: one fuzz target for FUZZTIME. Go 1.26's fuzz coordinator
# may report its own -fuzztime deadline as a failure ("context deadline
# exceeded", no failing input written: go.dev/issue/75804, fixed in Go
# 1.27), more often on a loaded machine; such a run is done again for the
# executions the first made, by count (-fuzztime Nx), which has no deadline
# to race. A failing input written to testdata/fuzz fails at once.
fuzz() {
	local pkg=$1 fz=$2 corpus try=$OUT/fuzz.try.json before after execs rc
	corpus=$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$fz
	before=$(ls "$corpus" 2>/dev/null | wc -l)
	go test -json -run '^$' -fuzz "^${fz}\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$try" | "$TS" stream
	rc=${PIPESTATUS[0]}
	after=$(ls "$corpus" 2>/dev/null | wc -l)
	if [ "$rc" != 0 ] && [ "$before" = "$after" ] &&
		grep -qF '"Test":"'"$fz"'","Output":"    context deadline exceeded\n"' "$try"; then
		execs=$(grep -o 'execs: [0-9]*' "$try" | tail -1 | grep -o '[0-9]*')
		[ "${execs:-0}" -gt 0 ] || execs=1000
		echo "test.sh: $fz: \"context deadline exceeded\" with no failing input written: go.dev/issue/75804; again for its $execs executions, by count (first run kept in $OUT/fuzz.retried.json)"
		cat "$try" >>"$OUT/fuzz.retried.json"
		gotest fuzz -run '^$' -fuzz "^${fz}\$" -fuzztime "${execs}x" "$pkg"
	else
		cat "$try" >>"$OUT/fuzz.json"
		"$TS" record -exit "$rc" >>"$OUT/fuzz.json"
	fi
	rm -f "$try"
}

fuzz_stage() {
	prebuild_wait
	for pkg in $(fuzz_pkgs); do
		# The package's fuzz targets (see fuzz_pkgs).
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for fz in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$dir"/*_test.go 2>/dev/null); do
			if [ "$FUZZTIME" = 0 ]; then
				"$TS" record -action skip -reason "FUZZTIME=0: not fuzzed (its seeds ran in the unit stage)" "$pkg $fz" >>"$OUT/fuzz.json"
			else
				fuzz "$pkg" "$fz"
			fi
		done
	done
}
if stage_on fuzz; then
	echo "== fuzz ($FUZZTIME each)"
	: >"$OUT/fuzz.json"
	timed fuzz fuzz_stage
	summary+=("fuzz=$OUT/fuzz.json")
fi

if [ -n "${package_pid:-}" ]; then
	wait "$package_pid" || true
	echo "== package: its output (it ran beside the fuzz stage)"
	cat "$OUT/package.out"
fi

echo
"$TS" summary -wall "$SECONDS" "${summary[@]}"
