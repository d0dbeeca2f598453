#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager from the Go module proxy
# into a cache outside the work tree, keyed by version. A no-op when the binaries exist.
#
# k8s.io/kubernetes cannot be `go install`ed: it requires its staging modules at v0.0.0
# with `replace => ./staging/...`. A wrapper module that replaces every staging module
# with its published v0.<minor>.<patch> twin builds the commands.
set -euo pipefail

K8S_VERSION="${VMOP_K8S_VERSION:-1.34.4}"
ETCD_VERSION="${VMOP_ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${VMOP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}"
K8S_DIR="$CACHE_ROOT/k8s/v$K8S_VERSION"
ETCD_DIR="$CACHE_ROOT/etcd/v$ETCD_VERSION"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# Go may be installed but not on PATH in a non-login shell (CI).
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

log() { echo "[build-control-plane] $*" >&2; }
require_go() {
  command -v go >/dev/null && return
  log "Go is needed to build the control plane (or point KUBEBUILDER_ASSETS at etcd, kube-apiserver, kube-controller-manager)"
  exit 1
}

build_k8s() {
  if [[ -x "$K8S_DIR/kube-apiserver" && -x "$K8S_DIR/kube-controller-manager" ]]; then return; fi
  require_go
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  local staging_version="v0.${K8S_VERSION#1.}"
  log "building Kubernetes v$K8S_VERSION (staging modules at $staging_version) in $work"
  cd "$work"
  go mod init vmop.local/k8s-build >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  local upstream_mod; upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
  # Every staging module k8s.io/kubernetes replaces, from that version's own go.mod.
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$upstream_mod" | awk '{print $1}' | while read -r module; do
    go mod edit -replace "$module=$module@$staging_version"
  done
  go mod edit -require "k8s.io/kubernetes@v$K8S_VERSION"
  go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S_VERSION"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  mkdir -p "$work/out"
  go build -trimpath -ldflags "$ldflags" -o "$work/out/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
  mkdir -p "$K8S_DIR"
  mv "$work/out/kube-apiserver" "$work/out/kube-controller-manager" "$K8S_DIR/"
  log "installed $(ls "$K8S_DIR" | tr '\n' ' ')in $K8S_DIR"
}

build_etcd() {
  if [[ -x "$ETCD_DIR/etcd" ]]; then return; fi
  require_go
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  log "building etcd v$ETCD_VERSION in $work"
  cd "$work"
  go mod init vmop.local/etcd-build >/dev/null 2>&1
  # The server's main package is the root of module go.etcd.io/etcd/server/v3.
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  mkdir -p "$work/out"
  go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" go.etcd.io/etcd/server/v3
  mkdir -p "$ETCD_DIR"
  mv "$work/out/etcd" "$ETCD_DIR/"
  log "installed etcd in $ETCD_DIR"
}

# Two test runs starting at once would otherwise both compile on a 2-core machine.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
build_etcd
build_k8s
# Print where the binaries are, for scripts that need them.
echo "K8S_BIN_DIR=$K8S_DIR"
echo "ETCD_BIN_DIR=$ETCD_DIR"
