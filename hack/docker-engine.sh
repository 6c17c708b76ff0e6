#!/usr/bin/env bash
# Makes sure a Docker engine runs here, for kind and the image builds: installs Debian's docker.io (and the
# tools hack/build-kind-node.sh needs) when missing, starts dockerd when it is not running, and raises the
# inotify limits that a kind cluster of several nodes needs. Needs root and Debian's apt.
#
# Where this host's capability bounding set lacks a capability (some VMs and sandboxes drop CAP_SYS_RESOURCE),
# privileged containers, kind's nodes among them, fail with "unable to apply caps". Docker then gets
# hack/kind/runc-bounded as its default runtime: runc minus exactly the missing capabilities.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[docker-engine] %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "error: needs root (apt-get, dockerd, sysctl)"; exit 1; }

need=()
command -v dockerd >/dev/null || need+=(docker.io)
for tool in debootstrap jq pkg-config iptables; do command -v "$tool" >/dev/null || need+=("$tool"); done
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
if [ "${#need[@]}" -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

# runc, bounded by this host's capabilities, when the host lacks any.
bounding=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
config=/etc/docker/daemon.json
mkdir -p /etc/docker
[ -s "$config" ] || echo '{}' >"$config"
if (((bounding & 0xffffffffff) != 0xffffffffff)); then
  mkdir -p /usr/local/libexec/gputopo
  install -m 0755 "$HERE/kind/runc-bounded" /usr/local/libexec/gputopo/runc
  ln -sf "$(command -v runc)" /usr/local/libexec/gputopo/runc.real
  jq '.runtimes["gputopo-runc"] = {"path": "/usr/local/libexec/gputopo/runc"} | .["default-runtime"] = "gputopo-runc"' \
    "$config" >"$config.new" && mv "$config.new" "$config"
  log "this host lacks capabilities (CapBnd $(awk '/^CapBnd:/ {print $2}' /proc/self/status)): runc is bounded by them"
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  # dockerd outlives this script: it gets none of our descriptors above stderr, so a lock its caller holds
  # (`flock /tmp/gputopo-kind.lock hack/docker-engine.sh`) is not held on by dockerd and containerd for good.
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi
    done
    exec nohup dockerd >/var/log/gputopo-dockerd.log 2>&1
  ) &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "error: dockerd did not start; see /var/log/gputopo-dockerd.log"; exit 1; }
else
  kill -HUP "$(pidof dockerd)" 2>/dev/null || true  # reload the runtimes from daemon.json
fi
sysctl -qw fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288
log "Docker engine $(docker version -f '{{.Server.Version}}') running (cgroup $(docker info -f '{{.CgroupVersion}}'))"
