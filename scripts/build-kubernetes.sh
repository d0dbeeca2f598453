#!/usr/bin/env bash
# Builds the Go programs of vmop's local Kubernetes from the Go module proxy into a cache outside
# the work tree, keyed by version: kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet and kube-proxy; CoreDNS (cluster DNS); helm; kube-router (the beds' NetworkPolicies);
# an OCI registry and crane (images of disks for the test bed); Dex. etcd comes unpacked from
# Debian 13's package. A quick no-op when the binaries exist. Each build's time is logged.
#
# k8s.io/kubernetes cannot be `go install`ed: it requires its staging modules at v0.0.0
# with `replace => ./staging/...`. A wrapper module that replaces every staging module
# with its published v0.<minor>.<patch> twin builds the commands. CoreDNS, helm and kube-router
# are built in the same module: one version of every dependency, so the packages they share with
# Kubernetes (client-go, apimachinery, the API types, gRPC: 82-92 % of theirs) compile once.
set -euo pipefail

K8S_VERSION="${VMOP_K8S_VERSION:-1.34.4}"
ETCD_SUITE="${VMOP_ETCD_SUITE:-trixie}"
DEBIAN_MIRROR="${VMOP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
COREDNS_VERSION="${VMOP_COREDNS_VERSION:-1.12.4}"
# The newest helm 3 built on this Kubernetes' client libraries (v0.34): it shares their compile.
HELM_VERSION="${VMOP_HELM_VERSION:-3.19.5}"
GCR_VERSION="${VMOP_GCR_VERSION:-0.22.1}"
# The only release the Go module proxy serves (v2.6.1 is refused); security flaws are reported for
# it: it only enforces NetworkPolicies in the local test beds, never in a user's cluster.
KUBE_ROUTER_VERSION="${VMOP_KUBE_ROUTER_VERSION:-2.1.0}"
# Dex has no release the Go module proxy serves as a module (its v2 tags lack /v2): the newest
# pseudo-version the proxy has.
DEX_VERSION="${VMOP_DEX_VERSION:-v0.0.0-20260806151424-ab64ed778070}"
CACHE_ROOT="${VMOP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}"
COREDNS_MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/coredns/main.go"
# One directory for what one module builds, named by everything that goes into it.
K8S_DIR="$CACHE_ROOT/k8s/v$K8S_VERSION-coredns$COREDNS_VERSION-helm$HELM_VERSION-kube-router$KUBE_ROUTER_VERSION-$(sha256sum "$COREDNS_MAIN" | cut -c1-12)"
ETCD_DIR="$CACHE_ROOT/etcd/debian-$ETCD_SUITE"
GCR_DIR="$CACHE_ROOT/go-containerregistry/v$GCR_VERSION"
DEX_DIR="$CACHE_ROOT/dex/$DEX_VERSION"
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# What the module builds besides Kubernetes' commands: package => binary.
declare -A OTHER_COMMANDS=(
  [./coredns]=coredns
  [helm.sh/helm/v3/cmd/helm]=helm
  [github.com/cloudnativelabs/kube-router/v2/cmd/kube-router]=kube-router
)

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The compiler collects garbage less often: 9-25 % less CPU for a compile of client-go and the
# apiserver library (337 s vs 306 s user, quiet machine), for 760 MB instead of 480 MB a process.
export GOGC=400
# Go may be installed but not on PATH in a non-login shell (CI).
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

log() { echo "[build-kubernetes] $*" >&2; }
require_go() {
  command -v go >/dev/null && return
  log "Go is needed to build Kubernetes (or point KUBEBUILDER_ASSETS at etcd, kube-apiserver, kube-controller-manager)"
  exit 1
}
all_present() {
  local dir="$1"; shift
  for binary in "$@"; do [[ -x "$dir/$binary" ]] || return 1; done
}

# Each build runs in a subshell: it changes directory into a work dir it removes on exit.
build_k8s() (
  all_present "$K8S_DIR" "${K8S_COMMANDS[@]}" "${OTHER_COMMANDS[@]}" && exit 0
  require_go
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  staging_version="v0.${K8S_VERSION#1.}"
  log "building Kubernetes v$K8S_VERSION (staging modules at $staging_version), CoreDNS, helm and kube-router in $work"
  cd "$work"
  go mod init vmop.local/k8s-build >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
  # Every staging module k8s.io/kubernetes replaces, from that version's own go.mod.
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$upstream_mod" | awk '{print $1}' | while read -r module; do
    go mod edit -replace "$module=$module@$staging_version"
  done
  go mod edit -require "k8s.io/kubernetes@v$K8S_VERSION"
  mkdir coredns && cp "$COREDNS_MAIN" coredns/
  packages=()
  for command in "${K8S_COMMANDS[@]}"; do packages+=("k8s.io/kubernetes/cmd/$command"); done
  go get "${packages[@]/%/@v$K8S_VERSION}" "github.com/coredns/coredns@v$COREDNS_VERSION" \
    "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@v$KUBE_ROUTER_VERSION"
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  # helm and kube-router print their own versions from these.
  ldflags+=" -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  ldflags+=" -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$KUBE_ROUTER_VERSION"
  mkdir -p "$work/out" "$K8S_DIR"
  go build -trimpath -ldflags "$ldflags" -o "$work/out/" "${packages[@]}" "${!OTHER_COMMANDS[@]}"
  for binary in "${K8S_COMMANDS[@]}" "${OTHER_COMMANDS[@]}"; do mv "$work/out/$binary" "$K8S_DIR/"; done
  log "installed ${K8S_COMMANDS[*]} ${OTHER_COMMANDS[*]} in $K8S_DIR"
)

# etcd from Debian 13's etcd-server (3.5: Debian 12 has only 3.4, too old for this Kubernetes),
# fetched by apt with a source list of its own (signatures checked as for any package) and unpacked
# into the cache: nothing is installed, the machine's release stays as it is. The fetch takes
# seconds; the Go build of etcd it replaces took 116-225 s of a cold provisioning.
install_etcd() (
  [[ -x "$ETCD_DIR/etcd" ]] && exit 0
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  log "fetching etcd-server from Debian $ETCD_SUITE"
  mkdir -p "$work/lists/partial" "$work/archives/partial" "$ETCD_DIR"
  echo "deb $DEBIAN_MIRROR $ETCD_SUITE main" >"$work/sources.list"
  local apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$work/lists" -o Dir::Cache::Archives="$work/archives" -o Dir::Cache::pkgcache=
    -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User="$(id -un)" -o Acquire::Languages=none)
  "${apt[@]}" update >/dev/null
  (cd "$work" && "${apt[@]}" download etcd-server >/dev/null)
  dpkg-deb -x "$work"/etcd-server_*.deb "$work/root"
  mv "$work/root/usr/bin/etcd" "$ETCD_DIR/"
  log "installed etcd $("$ETCD_DIR/etcd" --version | sed -n 's/^etcd Version: //p') in $ETCD_DIR"
)

# A main package of ours (scripts/<name>/main.go) built against `module@version`, into
# $dir/$binary; rebuilt when that file changes.
build_own_main() (
  local name="$1" module="$2" dir="$3" binary="$4"
  local_main="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$name/main.go"
  stamp="$dir/$binary.sha256"
  sum="$(sha256sum "$local_main" | cut -c1-64)"
  [[ -x "$dir/$binary" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]] && exit 0
  require_go
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  log "building $binary ($module) in $work"
  cd "$work"
  go mod init "vmop.local/$name" >/dev/null 2>&1
  cp "$local_main" .
  go get "$module"
  mkdir -p "$dir"
  go build -trimpath -ldflags "-s -w" -o "$dir/$binary" .
  echo "$sum" >"$stamp"
  log "installed $binary in $dir"
)

# Dex, the test bed's OpenID Connect provider (the web GUI's logins). Its module zip lacks the
# nested module api/v2 that its go.mod replaces with ./api/v2 (the proxy has only an older
# api/v2 without the newest admin calls): built without the gRPC admin API, which nothing here
# uses (three lines of cmd/dex/serve.go); logins, tokens and the password database are untouched.
build_dex() (
  [[ -x "$DEX_DIR/dex" ]] && exit 0
  require_go
  work="$(mktemp -d)"; trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
  log "building Dex $DEX_VERSION in $work"
  src="$(go mod download -json "github.com/dexidp/dex@$DEX_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  cp -r "$src" "$work/dex" && chmod -R u+w "$work/dex" && cd "$work/dex"
  go mod edit -dropreplace github.com/dexidp/dex/api/v2
  sed -i -e '/^\t"github.com\/dexidp\/dex\/api\/v2"$/d' -e '/^\t"github.com\/dexidp\/dex\/server\/apiserver"$/d' \
    -e '/api.RegisterDexServer(grpcSrv, apiserver.NewAPI(/d' cmd/dex/serve.go
  mkdir -p "$DEX_DIR"
  go build -trimpath -ldflags "-s -w" -o "$work/dex-bin" ./cmd/dex
  mv "$work/dex-bin" "$DEX_DIR/dex"
  log "installed dex in $DEX_DIR"
)
# A main package whose module has no replace directives, `go install`ed into $2/.
go_install() {
  local package="$1" dir="$2" binary="$3"
  [[ -x "$dir/$binary" ]] && return
  require_go
  log "building $package"
  mkdir -p "$dir"
  GOFLAGS= GOBIN="$dir" go install -trimpath -ldflags "-s -w" "$package"
  log "installed $binary in $dir"
}

# What a build took, when it built something.
timed() {
  local started=$SECONDS
  "$@"
  (( SECONDS - started < 2 )) || log "$1 ${2:-}: $((SECONDS - started)) s"
}

# Two test runs starting at once would otherwise both compile on a 2-core machine.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
timed install_etcd
# CoreDNS is built with the plugins the local cluster's Corefile uses (scripts/coredns/main.go):
# its own main links every plugin and the cloud SDKs of three of them.
timed build_k8s
# go-containerregistry's in-memory registry (its own command listens on localhost only).
timed build_own_main registry "github.com/google/go-containerregistry@v$GCR_VERSION" "$GCR_DIR" registry
timed go_install "github.com/google/go-containerregistry/cmd/crane@v$GCR_VERSION" "$GCR_DIR" crane
timed build_dex
# Print where the binaries are, for scripts that need them.
echo "K8S_BIN_DIR=$K8S_DIR"
echo "ETCD_BIN_DIR=$ETCD_DIR"
echo "COREDNS_BIN_DIR=$K8S_DIR"
echo "HELM_BIN_DIR=$K8S_DIR"
echo "GCR_BIN_DIR=$GCR_DIR"
echo "DEX_BIN_DIR=$DEX_DIR"
echo "KUBE_ROUTER_BIN_DIR=$K8S_DIR"
