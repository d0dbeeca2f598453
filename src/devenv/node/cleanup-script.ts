// What a local node leaves behind that stopping its processes does not remove, as one shell
// script: run when the node stops, and by its process group's reaper when its owner dies.

export interface CleanupTargets {
  /** The node's directory: mounts, loop devices and log links below it are the node's. */
  dir: string;
  netns: string;
  cgroupRoot: string;
  containerdSocket: string;
  containerdRoot: string;
}

/** A POSIX sh script that removes the node's leftovers; harmless to run twice. */
export function cleanupScript(targets: CleanupTargets): string {
  const q = (value: string) => `'${value.replaceAll("'", "'\\''")}'`;
  return `#!/bin/sh
# Removes what the local node in ${targets.dir} left behind. Safe to run more than once.
dir=${q(targets.dir)}
cgroup=${q(targets.cgroupRoot.replace(/^\//, ''))}

# The pods' processes (all in the node's cgroups), then containerd's shims of this node.
for procs in $(find "/sys/fs/cgroup/pids/$cgroup" -name cgroup.procs 2>/dev/null); do
  for pid in $(cat "$procs"); do kill -KILL "$pid" 2>/dev/null; done
done
pkill -KILL -f -- ${q(`containerd-shim.* -address ${targets.containerdSocket}( |$)`)} 2>/dev/null

# Loop devices on files below the directory: kubelet's on block volumes it maps (before their
# mounts go, while their paths still tell them apart), then the volume provisioner's below them.
detach_loops() {
  losetup --list --noheadings --output NAME,BACK-FILE 2>/dev/null | while read -r device file; do
    case "$file" in "$dir"/*) losetup -d "$device" 2>/dev/null ;; esac
  done
}
detach_loops

# Mounts below the directory (overlay roots, volumes, pod network namespaces), deepest first.
awk -v dir="$dir/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r mount; do
  umount -l "$mount" 2>/dev/null
done
detach_loops

# The network namespace; its veth pair, bridge and iptables rules go with it.
ip netns delete ${q(targets.netns)} 2>/dev/null

# The pods' cgroups, deepest first, in every hierarchy.
for hierarchy in /sys/fs/cgroup/*; do
  [ -d "$hierarchy/$cgroup" ] && find "$hierarchy/$cgroup" -depth -type d -exec rmdir {} \\; 2>/dev/null
done

# What kubelet and CNI keep in fixed places: log links, and CNI's results of the node's sandboxes.
find /var/log/containers -maxdepth 1 -lname "$dir/*" -delete 2>/dev/null
for sandbox in $(ls ${q(targets.containerdRoot)}/io.containerd.grpc.v1.cri/sandboxes 2>/dev/null); do
  rm -f /var/lib/cni/results/*-"$sandbox"-* 2>/dev/null
done
exit 0
`;
}
