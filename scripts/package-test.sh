#!/usr/bin/env bash
# package-test.sh: tests the systemd unit and the Debian package, as root on
# a Debian machine (scripts/test.sh runs it after go test; it installs the
# tools this needs):
#
#   sudo ./scripts/package-test.sh
#
#  1. dist/packetshaper.service: systemd-analyze security --offline=true
#     rates it at most 2.0.
#  2. scripts/package.sh builds the .deb; apt-get installs it (a packetshaper
#     already installed is purged first); every file is where it belongs
#     (the docs/ chapters the README links to too), the copyright file is in
#     Debian copyright format 1.0 with packetshaper's Apache-2.0, the two
#     conffiles are conffiles.
#  3. The installed unit: systemd-analyze verify says nothing, security still
#     at most 2.0; packetshaper --version names the package's version and
#     this commit; packetshaper check accepts /etc/packetshaper/policy.toml,
#     with no warning (the packaged RULES_OPTS diverts from it).
#  4. systemd itself runs the unit: a container (systemd-nspawn, systemd as
#     its PID 1, its own network namespace) boots an overlay of this machine's
#     root with the package installed, and inside it: systemctl start (the
#     queue rule is added, the queue bound by a dynamic user with
#     CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON only, no_new_privs, a seccomp
#     filter), UDP traffic is limited per flow, also by the kernel fast
#     path (--fastpath lo, its divert rule), /metrics answers, systemctl reload re-reads the
#     policy, SIGKILL brings a restart, systemctl stop removes the rules and
#     unbinds the queue, --rt-priority works with docs/operations.md's
#     drop-in; the maintainer scripts with systemd running (dpkg -r stops
#     and disables, dpkg -i neither enables nor starts, an upgrade
#     restarts). Nothing of it touches this machine's network.
#  5. apt-get remove (an enabled unit leaves no link behind), then purge:
#     nothing of the package is left, conffiles included.
#
# Every step that fails stops the script with a line saying what, and exit
# status 1. It installs and purges the package packetshaper: if one is
# installed and looks in use (a conffile changed, the unit enabled), it
# refuses unless PACKETSHAPER_TEST_PURGE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
export DEBIAN_FRONTEND=noninteractive
PROG=package-test.sh
fail() {
	echo "$PROG: FAIL: $*" >&2
	[ -z "${work:-}" ] || { trap - EXIT; echo "$PROG: its files are kept in $work" >&2; }
	exit 1
}
step() { echo "== $PROG: $*"; }
apt() { apt-get -o DPkg::Lock::Timeout=600 -y -q "$@"; }

[ "$(id -u)" = 0 ] || fail "must run as root (installs and removes the package, boots a container)"
for tool in systemd-analyze systemd-nspawn apt-get dpkg-deb go git unshare; do
	command -v "$tool" >/dev/null || fail "$tool not found (apt-get install systemd systemd-container; Go in /usr/local/go)"
done

UNIT=/usr/lib/systemd/system/packetshaper.service
MAXSCORE=2.0
work=$(mktemp -d /tmp/packetshaper-pkgtest.XXXXXX)
trap 'rm -rf "$work"' EXIT

# exposure FILE: checks systemd-analyze security's rating of FILE.
exposure() {
	local out score
	out=$(systemd-analyze security --offline=true --no-pager "$1" 2>&1) || fail "systemd-analyze security --offline=true $1 failed:"$'\n'"$out"
	score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$out")
	[ -n "$score" ] || fail "systemd-analyze security $1: no exposure level in its output:"$'\n'"$out"
	awk -v s="$score" -v m="$MAXSCORE" 'BEGIN { exit !(s <= m) }' ||
		fail "$1: exposure $score, want at most $MAXSCORE:"$'\n'"$(grep '✗' <<<"$out")"
	echo "$PROG: $1: exposure $score (at most $MAXSCORE): ok"
}

# ---------------------------------------------------------------- 1
step "the unit's exposure (systemd-analyze security --offline=true)"
exposure dist/packetshaper.service

# ---------------------------------------------------------------- 2
step "build the package (scripts/package.sh)"
deb=$(./scripts/package.sh --out "$work" | tail -1)
[ -f "$deb" ] || fail "scripts/package.sh did not leave a .deb (got '$deb')"
case "$(basename "$deb")" in
packetshaper_*_amd64.deb) ;;
*) fail "package name $(basename "$deb"): want packetshaper_VERSION_amd64.deb" ;;
esac
version=$(dpkg-deb -f "$deb" Version)

step "the package's contents (dpkg -c): man pages, completions, changelog"
dpkg -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$work/contents"
for f in /usr/share/man/man8/packetshaper.8.gz /usr/share/man/man8/packetshaper-replay.8.gz \
	/usr/share/man/man8/packetshaper-check.8.gz /usr/share/man/man8/packetshaper-flows.8.gz \
	/usr/share/man/man8/packetshaper-status.8.gz /usr/share/man/man8/packetshaper-rules.8.gz \
	/usr/share/man/man5/packetshaper.toml.5.gz \
	/usr/share/bash-completion/completions/packetshaper /usr/share/zsh/vendor-completions/_packetshaper \
	/usr/share/fish/vendor_completions.d/packetshaper.fish \
	/usr/share/doc/packetshaper/changelog.gz /usr/share/doc/packetshaper/README.md.gz; do
	grep -qx "$f" "$work/contents" || fail "dpkg -c $deb does not list $f"
done
for f in docs/man/*.[58]; do
	grep -qx "/usr/share/man/man${f##*.}/$(basename "$f").gz" "$work/contents" || fail "dpkg -c $deb does not list the man page of $f"
done
! grep -qx /usr/share/doc/packetshaper/README.md "$work/contents" || fail "README.md is shipped uncompressed"
m=$(dpkg-deb -f "$deb" Maintainer)
case "$m" in *example* | *noreply* | *placeholder*) fail "Maintainer '$m' looks like a placeholder" ;; esac
echo "$PROG: dpkg -c: man pages, completions, changelog.gz, README.md.gz: ok; Maintainer: $m"
commit=$(git rev-parse HEAD)
echo "$PROG: $deb: version $version"

if dpkg-query -W -f='${Status}' packetshaper 2>/dev/null | grep -q 'installed\|config-files'; then
	# Purged below: refuse when it looks in use (a changed conffile, the
	# unit enabled), unless told.
	inuse=""
	while read -r f sum _; do
		[ -n "$f" ] && [ -f "$f" ] && [ "$(md5sum <"$f" | cut -d' ' -f1)" != "$sum" ] && inuse="$inuse $f changed;"
	done < <(dpkg-query -W -f='${Conffiles}' packetshaper)
	[ -z "$(find /etc/systemd/system -name 'packetshaper*' 2>/dev/null)" ] || inuse="$inuse the unit is enabled;"
	if [ -n "$inuse" ] && [ "${PACKETSHAPER_TEST_PURGE:-0}" != 1 ]; then
		inuse=${inuse# }
		fail "packetshaper is installed and looks in use (${inuse%;}): this test purges it; PACKETSHAPER_TEST_PURGE=1 to let it"
	fi
	echo "$PROG: packetshaper is installed (an earlier run?): purging it first"
	apt purge packetshaper >/dev/null || fail "apt-get purge packetshaper (the earlier one) failed"
fi

step "apt-get install $deb"
apt install "$(realpath "$deb")" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "apt-get install failed"; }
dpkg-query -W -f='${Status}' packetshaper | grep -q 'install ok installed' || fail "packetshaper is not installed after apt-get install"
files=(/usr/bin/packetshaper /usr/sbin/packetshaper-rules "$UNIT" /etc/default/packetshaper /etc/packetshaper/policy.toml
	/usr/share/doc/packetshaper/README.md.gz /usr/share/doc/packetshaper/changelog.gz /usr/share/doc/packetshaper/copyright
	/usr/share/man/man8/packetshaper.8.gz /usr/share/man/man5/packetshaper.toml.5.gz /usr/share/man/man8/packetshaper-rules.8.gz
	/usr/share/bash-completion/completions/packetshaper
	/usr/share/doc/packetshaper/docs/configuration.md /usr/share/doc/packetshaper/docs/operations.md
	/usr/share/doc/packetshaper/RELIABILITY.md /usr/share/doc/packetshaper/docs/top.png /usr/share/doc/packetshaper/docs/replay-report.png)
for f in "${files[@]}"; do
	[ -f "$f" ] || fail "$f is missing after install"
	dpkg -S "$f" >/dev/null 2>&1 || fail "$f is not the package's (dpkg -S)"
done
[ -x /usr/bin/packetshaper ] && [ -x /usr/sbin/packetshaper-rules ] || fail "the binary or packetshaper-rules is not executable"
# The README's chapters are shipped beside it, at the paths it links to.
for f in $(grep -o '](docs/[a-z-]*\.md' README.md | sed 's/^](//' | sort -u); do
	[ -f "/usr/share/doc/packetshaper/$f" ] || fail "/usr/share/doc/packetshaper/$f (a chapter the README links to) is missing after install"
done
# Every relative link and image of the plain docs installed (the chapters,
# RELIABILITY.md) leads to an installed file: no link to a gzipped or
# missing file, no missing image (docs/top.png was).
for doc in /usr/share/doc/packetshaper/RELIABILITY.md /usr/share/doc/packetshaper/docs/*.md; do
	for l in $(grep -o '](\([^)#: ]*\)[)#]' "$doc" | sed 's/^](//; s/[)#]$//' | sort -u); do
		case "$l" in '' | http* | mailto*) continue ;; esac
		[ -e "$(dirname "$doc")/$l" ] || fail "$doc links to $l, which is not installed"
	done
done
echo "$PROG: every relative link and image of the installed docs resolves: ok"
# The copyright file: Debian copyright format 1.0, packetshaper under
# Apache-2.0 pointing at the common license, then the linked modules.
copyright=/usr/share/doc/packetshaper/copyright
head -1 "$copyright" | grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
	fail "$copyright: the first line is not the copyright format 1.0 header"
grep -qx 'License: Apache-2.0' "$copyright" || fail "$copyright: no 'License: Apache-2.0' paragraph"
grep -q '/usr/share/common-licenses/Apache-2.0' "$copyright" || fail "$copyright: no pointer to /usr/share/common-licenses/Apache-2.0"
[ -f /usr/share/common-licenses/Apache-2.0 ] || fail "/usr/share/common-licenses/Apache-2.0 (base-files) is missing"
conffiles=$(dpkg-query -W -f='${Conffiles}' packetshaper | awk 'NF { print $1 }' | sort | tr '\n' ' ')
[ "$conffiles" = "/etc/default/packetshaper /etc/packetshaper/policy.toml " ] || fail "conffiles are '$conffiles', want /etc/default/packetshaper /etc/packetshaper/policy.toml"
echo "$PROG: installed: ${files[*]}; conffiles: $conffiles"

# ---------------------------------------------------------------- 3
step "the installed unit (systemd-analyze verify, security)"
out=$(systemd-analyze verify "$UNIT" 2>&1) || fail "systemd-analyze verify $UNIT:"$'\n'"$out"
[ -z "$out" ] || fail "systemd-analyze verify $UNIT complains:"$'\n'"$out"
echo "$PROG: systemd-analyze verify $UNIT: ok"
exposure "$UNIT"

step "the installed binary"
v=$(packetshaper --version) || fail "packetshaper --version failed"
echo "$PROG: $v"
[ "$v" = "packetshaper $version (commit $commit$(case $version in *.dirty) echo -dirty ;; esac), $(go env GOVERSION))" ] ||
	fail "packetshaper --version says '$v'; want version $version and commit $commit"
packetshaper check /etc/packetshaper/policy.toml >"$work/check.out" 2>"$work/check.err" || { cat "$work/check.err"; fail "packetshaper check /etc/packetshaper/policy.toml failed"; }
grep -q '^\[\[rule\]\]' "$work/check.out" || fail "packetshaper check printed no rule"
# The packaged configuration passes its own check with no warning: the
# divert rules come from the rule file (RULES_OPTS --policy), so every rule
# sees its packets, and no policing rule takes TCP.
[ ! -s "$work/check.err" ] || fail "packetshaper check of the packaged configuration warns:"$'\n'"$(cat "$work/check.err")"
grep -q '^RULES_OPTS="--policy /etc/packetshaper/policy.toml"' /etc/default/packetshaper || fail "/etc/default/packetshaper does not divert from the rule file: $(grep '^RULES_OPTS' /etc/default/packetshaper)"
echo "$PROG: packetshaper check /etc/packetshaper/policy.toml: ok, no warning (RULES_OPTS --policy)"

# ---------------------------------------------------------------- 4
step "the installed man pages, completions and changelog"
if command -v man >/dev/null; then
	for p in /usr/share/man/man8/packetshaper*.8.gz /usr/share/man/man5/packetshaper.toml.5.gz; do
		warn=$(MANWIDTH=80 man --warnings -l "$p" 2>&1 >"$work/man.out") || fail "man -l $p failed: $warn"
		[ -z "$warn" ] || fail "man -l $p warns:"$'\n'"$warn"
		[ "$(wc -l <"$work/man.out")" -gt 10 ] || fail "man -l $p rendered $(wc -l <"$work/man.out") lines"
	done
	echo "$PROG: man --warnings -l renders every installed page without a warning: ok"
else
	echo "$PROG: no man command (man-db): the installed pages' rendering is not checked"
fi
zcat /usr/share/doc/packetshaper/changelog.gz | head -1 | grep -q "^packetshaper ($version) " ||
	fail "changelog.gz does not start with this version's entry: $(zcat /usr/share/doc/packetshaper/changelog.gz | head -1)"
bash -c 'source /usr/share/bash-completion/completions/packetshaper && declare -F __start_packetshaper >/dev/null' ||
	fail "the bash completion does not define __start_packetshaper"
grep -q "packetshaper" /usr/share/zsh/vendor-completions/_packetshaper /usr/share/fish/vendor_completions.d/packetshaper.fish ||
	fail "the zsh or fish completion is empty"
echo "$PROG: changelog.gz starts with $version; bash completion loads: ok"

step "systemd runs the unit (a container booted with systemd-nspawn)"
./scripts/package-systemd-test.sh "$work/nspawn" "$deb" || fail "the unit under systemd (scripts/package-systemd-test.sh)"

# ---------------------------------------------------------------- 5
step "apt-get remove, then purge"
systemctl enable packetshaper.service >/dev/null 2>&1 || fail "systemctl enable packetshaper.service (offline) failed"
apt remove packetshaper >"$work/remove.log" 2>&1 || { cat "$work/remove.log"; fail "apt-get remove packetshaper failed"; }
dpkg-query -W -f='${Status}' packetshaper | grep -q 'config-files' || fail "after remove: status '$(dpkg-query -W -f='${Status}' packetshaper)', want config-files"
for f in /usr/bin/packetshaper /usr/sbin/packetshaper-rules "$UNIT" /usr/share/doc/packetshaper; do
	[ ! -e "$f" ] || fail "$f is left after apt-get remove"
done
left=$(find /etc/systemd/system -name 'packetshaper*' 2>/dev/null)
[ -z "$left" ] || fail "links to the removed unit are left: $left"
[ -f /etc/default/packetshaper ] && [ -f /etc/packetshaper/policy.toml ] || fail "remove (not purge) must keep the conffiles"
echo "$PROG: removed: binary, unit, rules script and docs gone, conffiles kept, no enablement link left"
apt purge packetshaper >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "apt-get purge packetshaper failed"; }
! dpkg-query -W packetshaper >/dev/null 2>&1 || fail "dpkg still knows packetshaper after purge: $(dpkg-query -W -f='${Status}' packetshaper)"
! dpkg -L packetshaper >/dev/null 2>&1 || fail "dpkg -L packetshaper still lists files after purge"
for f in /etc/default/packetshaper /etc/packetshaper /var/lib/dpkg/info/packetshaper.list; do
	[ ! -e "$f" ] || fail "$f is left after apt-get purge"
done
echo "$PROG: purged: nothing of packetshaper is left"
echo "$PROG: all passed"
