#!/usr/bin/env bash
# Builds the container images vmop's local Kubernetes runs, with buildah from Debian's packages, and
# leaves each as a docker-archive tar in a cache outside the work tree, keyed by the hash of its
# inputs. A quick no-op when the archives exist. Prints `NAME_IMAGE=<ref>` and `NAME_ARCHIVE=<tar>`.
#
# - vmop-manager and vmop-runner: the project's Dockerfile, unchanged (`docker build` builds it too).
# - Stand-ins for public images no registry here can serve, made from Debian's packages:
#   debian:trixie-slim (mmdebstrap), redis (the chart's bundled Redis), a pause image (kubelet's
#   pod sandbox) and CoreDNS (cluster DNS, from the binary build-kubernetes.sh makes).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
CACHE_ROOT="${VMOP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}"
ARCHIVES="$CACHE_ROOT/images"
# buildah's own storage (layers, so an edit of src/ rebuilds only the last steps) lives in the cache too.
BUILDAH=(buildah --root "$CACHE_ROOT/buildah/storage" --runroot "${XDG_RUNTIME_DIR:-/run}/vmop-buildah")
BASE_REF=docker.io/library/debian:trixie-slim
# Keep in step with helm/vmop/values.yaml (redis.image) and scripts/images/redis.Dockerfile.
REDIS_REF=docker.io/library/redis:8.0
PAUSE_REF=registry.k8s.io/pause:3.10
COREDNS_REF=registry.k8s.io/coredns/coredns:v${VMOP_COREDNS_VERSION:-1.12.4}

log() { echo "[build-images] $*" >&2; }
hash_of() { sha256sum | cut -c1-16; }
# The content of files (paths relative to the repository), with their names, in a stable order.
files_digest() { (cd "$repo" && for file in "$@"; do echo "$file"; cat "$file"; done) | hash_of; }

# Every file the Dockerfile's build context holds (see .dockerignore).
context_files() {
  (cd "$repo" && { ls package.json package-lock.json tsconfig.json tsconfig.build.json; find src templates web -type f; } | LC_ALL=C sort)
}

# Loads `ref` into buildah's storage from its archive unless it is there already.
ensure_loaded() {
  local archive="$1" ref="$2"
  "${BUILDAH[@]}" inspect --type image "$ref" >/dev/null 2>&1 && return
  "${BUILDAH[@]}" pull --quiet "docker-archive:$archive" >/dev/null
}

save() {
  local ref="$1" archive="$2"
  rm -f "$archive.partial"
  "${BUILDAH[@]}" push --quiet "$ref" "docker-archive:$archive.partial:$ref" >/dev/null
  mv "$archive.partial" "$archive"
}

# Each edit of src/ makes new vmop images: keep the two newest builds (archives and tags) of each
# image and, when many have piled up, drop the untagged layers of earlier builds.
prune_storage() {
  local name
  for name in debian-trixie-slim pause coredns redis vmop-manager vmop-runner; do
    ls -t "$ARCHIVES/$name-"*.tar 2>/dev/null | grep -E "/$name-[0-9a-f]{16}\.tar$" | tail -n +3 | xargs -r rm -f
  done
  for name in localhost/vmop-manager localhost/vmop-runner; do
    # Newest first.
    "${BUILDAH[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' | grep "^$name:" | tail -n +3 |
      xargs -r "${BUILDAH[@]}" rmi --force >/dev/null 2>&1 || true
  done
  if [[ "$("${BUILDAH[@]}" images --noheading --filter dangling=true --quiet | wc -l)" -gt 20 ]]; then
    "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
  fi
}

# An image of one layer: the files below `root`, run by `user` as `entrypoint...`.
image_from_dir() {
  local ref="$1" root="$2" user="$3"; shift 3
  local container entrypoint
  entrypoint="$(printf '"%s",' "$@")"
  container="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" copy --quiet "$container" "$root" / >/dev/null
  "${BUILDAH[@]}" config --entrypoint "[${entrypoint%,}]" --user "$user" "$container"
  "${BUILDAH[@]}" commit --quiet --rm "$container" "$ref" >/dev/null
}

build_base() {
  local key; key="$( { declare -f build_base; mmdebstrap --version; } | hash_of)"
  BASE_ARCHIVE="$ARCHIVES/debian-trixie-slim-$key.tar"
  if [[ ! -f "$BASE_ARCHIVE" ]]; then
    log "making $BASE_REF from Debian's packages (mmdebstrap)"
    local work; work="$(mktemp -d)"
    # minbase without documentation, like Debian's official slim images.
    mmdebstrap --quiet --variant=minbase --format=tar \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' --aptopt='Acquire::Languages "none"' \
      trixie "$work/rootfs.tar" \
      "deb http://deb.debian.org/debian trixie main" \
      "deb http://deb.debian.org/debian trixie-updates main" \
      "deb http://deb.debian.org/debian-security trixie-security main"
    local container; container="$("${BUILDAH[@]}" from scratch)"
    "${BUILDAH[@]}" add --quiet "$container" "$work/rootfs.tar" / >/dev/null
    "${BUILDAH[@]}" config --cmd '["bash"]' --label vmop.stand-in=true "$container"
    "${BUILDAH[@]}" commit --quiet --rm "$container" "$BASE_REF" >/dev/null
    rm -rf "$work"
    save "$BASE_REF" "$BASE_ARCHIVE"
  fi
  ensure_loaded "$BASE_ARCHIVE" "$BASE_REF"
  BASE_KEY="$key"
}

# A TLS-inspecting proxy's CA (as this machine's NODE_EXTRA_CA_CERTS names it) must reach npm in the build.
proxy_ca_args() {
  [[ -n "${NODE_EXTRA_CA_CERTS:-}" && -f "$NODE_EXTRA_CA_CERTS" ]] || return 0
  echo "--volume=$NODE_EXTRA_CA_CERTS:/run/build-ca.crt:ro"
  echo "--build-arg=NODE_EXTRA_CA_CERTS=/run/build-ca.crt"
}

build_vmop() {
  local version; version="$(node -p 'require(process.argv[1]).version' "$repo/package.json")"
  local key; key="$( { echo "$BASE_KEY $version"; files_digest Dockerfile .dockerignore $(context_files); } | hash_of)"
  local target
  for target in manager runner; do
    local ref="localhost/vmop-$target:$key" archive="$ARCHIVES/vmop-$target-$key.tar"
    if [[ ! -f "$archive" ]]; then
      log "building $ref (Dockerfile target $target)"
      "${BUILDAH[@]}" bud --quiet --layers --pull=never --isolation chroot --target "$target" \
        --build-arg "VERSION=$version" $(proxy_ca_args) -t "$ref" "$repo" >/dev/null
      save "$ref" "$archive"
    fi
    local name; name="$(tr a-z A-Z <<<"$target")"
    echo "${name}_IMAGE=$ref"
    echo "${name}_ARCHIVE=$archive"
  done
}

build_redis() {
  local key; key="$( { echo "$BASE_KEY"; files_digest scripts/images/redis.Dockerfile; } | hash_of)"
  local archive="$ARCHIVES/redis-$key.tar"
  if [[ ! -f "$archive" ]]; then
    log "building the stand-in $REDIS_REF from Debian's redis-server"
    "${BUILDAH[@]}" bud --quiet --layers --pull=never --isolation chroot -t "$REDIS_REF" \
      -f "$here/images/redis.Dockerfile" "$here/images" >/dev/null
    save "$REDIS_REF" "$archive"
  fi
  echo "REDIS_IMAGE=$REDIS_REF"
  echo "REDIS_ARCHIVE=$archive"
}

build_pause() {
  local key; key="$(files_digest scripts/images/pause.c | hash_of)"
  local archive="$ARCHIVES/pause-$key.tar"
  if [[ ! -f "$archive" ]]; then
    log "building $PAUSE_REF from scripts/images/pause.c"
    local work; work="$(mktemp -d)"
    gcc -Os -static -o "$work/pause" "$here/images/pause.c"
    image_from_dir "$PAUSE_REF" "$work" 65535:65535 /pause
    rm -rf "$work"
    save "$PAUSE_REF" "$archive"
  fi
  echo "PAUSE_IMAGE=$PAUSE_REF"
  echo "PAUSE_ARCHIVE=$archive"
}

build_coredns() {
  local binary; binary="$(bash "$here/build-kubernetes.sh" | sed -n 's/^COREDNS_BIN_DIR=//p')/coredns"
  local key; key="$(sha256sum "$binary" | hash_of)"
  local archive="$ARCHIVES/coredns-$key.tar"
  if [[ ! -f "$archive" ]]; then
    log "building $COREDNS_REF from $binary"
    local work; work="$(mktemp -d)"
    cp "$binary" "$work/coredns"
    # Root, as upstream's image: it binds port 53.
    image_from_dir "$COREDNS_REF" "$work" 0:0 /coredns
    rm -rf "$work"
    save "$COREDNS_REF" "$archive"
  fi
  echo "COREDNS_IMAGE=$COREDNS_REF"
  echo "COREDNS_ARCHIVE=$archive"
}

mkdir -p "$ARCHIVES"
# Two builds at once would both download and compile on a 2-core machine.
exec 8>"$CACHE_ROOT/.images.lock"
flock 8
# Working containers of a build that was killed hold overlay mounts; the lock says none is running.
"${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
build_base
build_pause
build_redis
build_vmop
# Last: its binary comes from build-kubernetes.sh, which provisioning runs meanwhile.
build_coredns
prune_storage
