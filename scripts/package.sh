#!/usr/bin/env bash
# package.sh: build the Debian package packetshaper_VERSION_amd64.deb.
#
#   ./scripts/package.sh [--out DIR]      (default DIR: build/)
#
# Builds /usr/bin/packetshaper (static, CGO_ENABLED=0) with the version and
# commit in it (packetshaper --version), writes the copyright file (Debian
# copyright format 1.0: packetshaper's Apache-2.0 from dist/deb/copyright,
# and the license of every Go module linked in), and packs dist/nfpm.yaml's files
# with nfpm, pinned in scripts/package/go.mod (fetched through the Go module
# proxy on first use). Prints the .deb's path on its last line. Needs Go and
# git; not root.
#
# The version: from the newest tag vX.Y.Z, X.Y.Z when HEAD is the tag,
# X.Y.Z+git<date>.<hash> after it; with no tag 0.0.0~git<date>.<hash>
# (date: the commit's, UTC). A tree with uncommitted changes adds ".dirty"
# to the version and "-dirty" to the commit. PACKETSHAPER_VERSION overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
PROG=package.sh
out=build
while [ $# -gt 0 ]; do
	case "$1" in
	--out) [ $# -ge 2 ] || { echo "$PROG: --out needs a directory" >&2; exit 2; }; out=$2; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$PROG: unknown argument '$1' (--out DIR)" >&2; exit 2 ;;
	esac
done

command -v go >/dev/null || { echo "$PROG: go not found (expected in /usr/local/go/bin)" >&2; exit 1; }
command -v git >/dev/null || { echo "$PROG: git not found" >&2; exit 1; }

# ---------------------------------------------------------------- version
hash=$(git rev-parse --short=12 HEAD)
commit=$(git rev-parse HEAD)
date=$(TZ=UTC git log -1 --date=format-local:%Y%m%d --format=%cd HEAD)
dirty=""
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	dirty=.dirty
	commit=$commit-dirty
fi
if tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null); then
	base=${tag#v}
	if [ "$(git rev-list -n1 "$tag")" = "$(git rev-parse HEAD)" ]; then
		version=$base$dirty
	else
		version=$base+git$date.$hash$dirty
	fi
else
	version=0.0.0~git$date.$hash$dirty
fi
version=${PACKETSHAPER_VERSION:-$version}
case "$version" in
[0-9]*) ;;
*) echo "$PROG: version '$version' must start with a digit (Debian version)" >&2; exit 1 ;;
esac
echo "$PROG: version $version, commit $commit"

# ---------------------------------------------------------------- binary
mkdir -p build "$out"
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath \
	-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
	-o build/packetshaper ./cmd/packetshaper
build/packetshaper --version

# ---------------------------------------------------------------- copyright
# Debian copyright format 1.0: dist/deb/copyright (packetshaper itself,
# Apache-2.0), then a paragraph per Go module linked into the binary, with
# its license text as found in the module cache, and Go's own (the runtime
# and standard library). License text lines are indented by one space, and
# empty lines written as " .", as the format asks.
fmtlicense() { sed -e 's/[[:space:]]*$//' -e 's/^$/./' -e 's/^/ /' "$1"; }
{
	sed "s/@COMMIT@/$commit/" dist/deb/copyright
	goversion=$(go env GOVERSION)
	printf '\nFiles: go/*\nCopyright: The Go Authors\nLicense: Go\n'
	fmtlicense "$(go env GOROOT)/LICENSE"
	printf 'Comment: Go %s: the runtime and standard library linked into\n /usr/bin/packetshaper.\n' "$goversion"
	go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}' ./cmd/packetshaper | sort -u |
		while read -r path ver dir; do
			lic=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'COPYING*' -o -iname 'LICENCE*' \) | sort | head -1)
			[ -n "$lic" ] || { echo "$PROG: no license file in module $path $ver ($dir)" >&2; exit 1; }
			printf '\nFiles: vendor/%s/*\nCopyright: the authors of %s, as its license text states\nLicense: %s\n' "$path" "$path" "$path"
			fmtlicense "$lic"
			printf 'Comment: the Go module %s %s, linked into /usr/bin/packetshaper.\n' "$path" "$ver"
		done
} >build/copyright

# ---------------------------------------------------------------- package
deb="$out/packetshaper_${version}_amd64.deb"
rm -f "$deb"
PACKETSHAPER_VERSION=$version go tool -modfile=scripts/package/go.mod nfpm package \
	--config dist/nfpm.yaml --packager deb --target "$deb" >&2
echo "$PROG: built $deb"
echo "$deb"
