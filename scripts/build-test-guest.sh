#!/usr/bin/env bash
# Builds the vmop test guest (Debian's cloud kernel + a busybox initramfs, see scripts/test-guest/) into
# a cache outside the work tree, keyed by kernel version and a hash of the build inputs, and prints the
# directory holding `vmlinuz` and `initrd.img`, and `disk.qcow2`: the same guest on a disk that
# boots by itself (SYSLINUX on FAT), for disk imports. A quick no-op when that directory exists.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
guest_files="$here/test-guest"
cache_root="${VMOP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/test-guest"
busybox="$(command -v busybox)"
# What the guest's init needs: virtio PCI, balloon, disks, SCSI CD-ROM and disks (the cloud kernel has no AHCI),
# the vmop agent's virtio-serial port, the ACPI power button as an input event device, and vfat for
# the cloud-init (NoCloud) drive.
modules=(virtio_pci virtio_balloon virtio_blk virtio_scsi sr_mod sd_mod isofs virtio_console button evdev
  vfat nls_cp437 nls_ascii nls_utf8 virtio_net)
# Debian's qemu-guest-agent and dropbear (an SSH server), with the shared libraries they need, so
# tests speak the real protocols.
guest_programs=(/usr/sbin/qemu-ga /usr/sbin/dropbear)

log() { echo "[build-test-guest] $*" >&2; }

kernel_version() {
  local newest
  newest="$(ls /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$newest" ]] || { log "no /boot/vmlinuz-*-cloud-amd64: install linux-image-cloud-amd64"; exit 1; }
  echo "${newest#/boot/vmlinuz-}"
}

inputs_hash() {
  {
    cat "${BASH_SOURCE[0]}"
    "$busybox" | head -n 1
    sha256sum "${guest_programs[@]}"
    (cd "$guest_files" && find . -type f | LC_ALL=C sort | while read -r file; do echo "$file"; cat "$file"; done)
  } | sha256sum | cut -c1-12
}

# Ordered, de-duplicated module files (dependencies first), as modprobe resolves them.
module_paths() {
  local kver="$1" module
  for module in "${modules[@]}"; do
    modprobe -S "$kver" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
  done | awk '!seen[$0]++'
}

# Busybox insmod takes plain .ko files only; Debian may ship .ko.xz or .ko.zst.
copy_module() {
  local source="$1" target="$2"
  case "$source" in
    *.ko.xz) xz -dc "$source" >"$target" ;;
    *.ko.zst) zstd -qdc "$source" >"$target" ;;
    *.ko.gz) gzip -dc "$source" >"$target" ;;
    *.ko) cp "$source" "$target" ;;
    *) log "unexpected module file $source"; exit 1 ;;
  esac
}

build() {
  local kver="$1" out="$2" work root path name
  work="$(mktemp -d "$cache_root/.build.XXXXXX")"
  trap 'rm -rf "$work"' RETURN
  root="$work/root"
  mkdir -p "$root"/{bin,dev,proc,sys,run,tmp,mnt,lib/modules} "$work/out"
  ln -s bin "$root/sbin"
  cp -a "$guest_files/." "$root/"
  cp "$busybox" "$root/bin/busybox"
  for name in $("$busybox" --list); do
    [[ -e "$root/bin/$name" ]] || ln -s busybox "$root/bin/$name"
  done
  for program in "${guest_programs[@]}"; do
    [[ -x "$program" ]] || { log "no $program: install qemu-guest-agent and dropbear-bin"; exit 1; }
    cp "$program" "$root/bin/$(basename "$program")"
    ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r path; do
      mkdir -p "$root$(dirname "$path")"
      cp -L "$path" "$root$path"
    done
  done
  module_paths "$kver" | while read -r path; do
    name="$(basename "$path")"
    name="${name%%.ko*}.ko"
    copy_module "$path" "$root/lib/modules/$name"
    echo "$name" >>"$root/lib/modules/load-order"
  done
  # Uncompressed: under TCG, unpacking a compressed initramfs costs more boot time than it saves.
  (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null --create --format=newc --quiet) >"$work/out/initrd.img"
  cp "/boot/vmlinuz-$kver" "$work/out/vmlinuz"
  build_disk "$work"
  mv -T "$work/out" "$out"
  log "built $out ($(wc -l <"$root/lib/modules/load-order") modules)"
}

# A FAT file system that is the whole disk (SeaBIOS boots its boot sector), SYSLINUX loading the
# same kernel and initramfs with the same command line; made with mtools, so no mount and no root.
build_disk() {
  local work="$1" fs="$1/disk.raw" kib
  kib=$(( ($(stat -c %s "$work/out/vmlinuz") + $(stat -c %s "$work/out/initrd.img")) / 1024 + 4096 ))
  printf 'DEFAULT vmop\nPROMPT 0\nTIMEOUT 0\nLABEL vmop\n  KERNEL vmlinuz\n  INITRD initrd.img\n  APPEND console=ttyS0 quiet no_timer_check\n' >"$work/syslinux.cfg"
  mkfs.vfat -n VMOPGUEST -C "$fs" "$kib" >/dev/null
  syslinux --install "$fs"
  MTOOLS_SKIP_CHECK=1 mcopy -i "$fs" "$work/out/vmlinuz" "$work/out/initrd.img" "$work/syslinux.cfg" ::
  qemu-img convert -f raw -O qcow2 "$fs" "$work/out/disk.qcow2"
}

kver="$(kernel_version)"
out="$cache_root/$kver-$(inputs_hash)"
if [[ ! -f "$out/disk.qcow2" ]]; then
  mkdir -p "$cache_root"
  # Parallel test workers may ask at once: one builds, the others wait and reuse its result.
  exec 9>"$cache_root/.lock"
  flock 9
  [[ -f "$out/disk.qcow2" ]] || build "$kver" "$out"
fi
echo "$out"
