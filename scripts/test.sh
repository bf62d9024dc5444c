#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine, as root:
#
#   sudo ./scripts/test.sh
#
# Installs what the tests need with apt-get (only what is missing), then runs
# go vet and every test: unit, property, golden, fuzz seed corpora, the race
# detector over the concurrent packages, and the end-to-end tests that run the real binary against the real kernel in
# network namespaces they create (those need root; as another user they skip
# and say so), and the replay report in headless Chromium. Then, as root,
# scripts/package-test.sh: the systemd unit's exposure, the .deb built,
# installed, run by systemd in a container, removed and purged. Then each
# fuzz target runs for a few seconds (FUZZTIME, 0 to
# skip). Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"

# chromium (and a font for it): TestReportInBrowser opens replay --report's page.
# redis-server: the global rules' tests start their own stores on loopback.
need=(iproute2 iptables nftables iputils-ping tcpdump netcat-openbsd kmod ca-certificates gcc libc6-dev hping3 systemd systemd-container procps git chromium fonts-dejavu-core redis-server redis-tools)
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

echo "== go vet"
go vet ./...

echo "== go test"
# -p 1: the end-to-end tests measure rates through the kernel; packages
# running side by side on a 2-core machine would disturb them.
go test -p 1 -count=1 -timeout 20m ./...

echo "== go test -race (the packages with goroutines or shared state: live command, daemon, nfq, offload, policy, global)"
go test -race -p 1 -count=1 -timeout 15m ./cmd/packetshaper ./daemon/... ./nfq ./offload ./policy ./global

echo "== the systemd unit and the Debian package (scripts/package-test.sh)"
if [ "$(id -u)" = 0 ]; then
	./scripts/package-test.sh
else
	echo "test.sh: not root: skipping scripts/package-test.sh (it installs the package and boots a container)"
fi

FUZZTIME=${FUZZTIME:-10s}
if [ "$FUZZTIME" != 0 ]; then
	echo "== fuzz ($FUZZTIME each)"
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for fz in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
			go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$FUZZTIME" "$pkg"
		done
	done
fi
echo "test.sh: all tests passed"
