#!/usr/bin/env bash
# Build the local control plane's binaries from Kubernetes' own Go modules, once.
#
#   hack/controlplane/build.sh          # prints the directory holding the binaries
#
# The binaries are cached under $CRAFT_CONTROLPLANE_CACHE (default
# ~/.cache/craft-operator/controlplane), keyed by a hash of this module's go.mod, go.sum and
# sources: a second run with nothing changed prints the same directory and builds nothing.
# Go's own module and build caches make a rebuild after a small change quick too. The cache
# keeps the three builds used last (other checkouts of other sources share it); a build
# directory another run is still filling is left alone unless abandoned for a day.
# Needs Go (the version go.mod names) and the Go module proxy; nothing else is downloaded.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CRAFT_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/craft-operator/controlplane}"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok podexec kubectl)

die() { echo "controlplane build: $*" >&2; exit 1; }

key="$(cd "$here" && find build.sh go.mod go.sum cmd -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
out="$cache/$key"
KEEP_BUILDS=3

# Builds beyond the three used last, and staging directories abandoned for a day, go. Each
# use touches its build, so another checkout's build in use is among the three. Both are
# housekeeping: a cache that is read-only (shared, or another user's) is used as it is.
prune() {
    if ! touch "$out" 2>/dev/null; then
        echo "controlplane build: cannot mark $out as used (a read-only cache?): nothing pruned" >&2
        return 0
    fi
    local stale
    find "$cache" -mindepth 1 -maxdepth 1 -type d -name '.build-*' -mmin +1440 -exec rm -rf {} + ||
        echo "controlplane build: abandoned builds in $cache could not all be removed" >&2
    stale="$(find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
        LC_ALL=C sort -rn | tail -n +$((KEEP_BUILDS + 1)) | cut -d' ' -f2-)" || stale=""
    [[ -z $stale ]] || xargs -d '\n' rm -rf <<<"$stale" ||
        echo "controlplane build: old builds in $cache could not all be removed" >&2
}

complete=1
for binary in "${binaries[@]}"; do [[ -x "$out/$binary" ]] || complete=0; done
if [[ $complete == 1 ]]; then
    prune
    echo "$out"
    exit 0
fi

# Go is needed only to build: a cached build is found without it.
command -v go >/dev/null 2>&1 || die "Go is not installed (go.mod asks for $(awk '/^go /{print $2}' "$here/go.mod"))"
mkdir -p "$cache"
staging="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$staging"' EXIT
echo "controlplane build: building ${binaries[*]} into $out (the first build takes minutes)" >&2
(
    cd "$here"
    # The version the binaries report (kubectl version, /version), as Kubernetes' own
    # release builds stamp it; -s -w: no symbol tables, for smaller binaries, quicker links.
    version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
    minor="${version#v1.}"; minor="${minor%%.*}"
    stamp="k8s.io/component-base/version"
    go build -buildvcs=false -ldflags="-s -w -X $stamp.gitVersion=$version -X $stamp.gitMajor=1 -X $stamp.gitMinor=$minor -X $stamp.gitTreeState=clean" \
        -o "$staging/" ./cmd/...
) >&2 || die "go build failed (see above)"
for binary in "${binaries[@]}"; do [[ -x "$staging/$binary" ]] || die "go build made no $binary"; done
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
prune
echo "$out"
