#!/usr/bin/env bash
# Installs everything vmop's tests and `vmop dev` need on a fresh Debian machine: Debian packages,
# npm packages, the Go-built Kubernetes (control plane, kubelet, kube-proxy, CoreDNS, helm), the
# container images (vmop's from the Dockerfile, stand-ins for public ones) and the QEMU test guest.
# Each step checks first, so a second run is a quick no-op.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[provision] $*" >&2; }

DEBIAN_PACKAGES=(
  qemu-system-x86 qemu-utils ovmf swtpm swtpm-tools mtools dosfstools redis-server
  busybox-static linux-image-cloud-amd64 xz-utils cpio kmod genisoimage kubectl chromium tmux
  qemu-guest-agent dropbear-bin openssh-client syslinux syslinux-common
  # The local node and its images: a container runtime, CNI, kube-proxy's tools, an image builder.
  containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux openssl
  buildah mmdebstrap gcc libc6-dev
  # promtool, for the chart's alert rules and their unit tests.
  prometheus
  # bench:migration's 10 ms ping to a VM's own address; bench:network's other binding.
  iputils-ping passt
  # kube-router, the beds' NetworkPolicy enforcer, keeps its address sets with ipset.
  ipset
)

install_debian_packages() {
  local missing=()
  for package in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -q
  # INITRD=No: the kernel is only the test guest's (which packs its own initrd), so the host's
  # initramfs for it is not generated (it took about a minute of the cold provisioning).
  $sudo env DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -q --no-install-recommends "${missing[@]}"
}

install_npm_packages() {
  # npm ci records what it installed in node_modules/.package-lock.json; reinstall when the lock differs.
  if [[ -f node_modules/.package-lock.json ]] && [[ node_modules/.package-lock.json -nt package-lock.json ]]; then return; fi
  log "installing npm packages (npm ci)"
  npm ci --no-audit --no-fund
}

# The CLI bundled into dist/cli/ (scripts/build-cli.mjs, a second or two): bin/vmop runs it while
# no source is newer than its stamp.
build_cli() {
  rm -rf dist
  node scripts/build-cli.mjs
  touch dist/.from-src
}

# Each step's time, so a slow provisioning says where it went.
step() {
  local started=$SECONDS
  "$@"
  log "$(printf '%-28s %4ds' "$*" $((SECONDS - started)))"
}
# The Go builds (most of a cold provisioning) need nothing the other steps install: they run
# meanwhile. The images wait for them only for the CoreDNS image, their last.
step bash scripts/build-kubernetes.sh >/dev/null &
go_builds=$!
step install_debian_packages
step install_npm_packages
step build_cli
step bash scripts/build-images.sh >/dev/null
step bash scripts/build-test-guest.sh >/dev/null
wait "$go_builds"
log "ready in $SECONDS s"
