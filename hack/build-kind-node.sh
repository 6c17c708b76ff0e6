#!/usr/bin/env bash
# Builds, without any container registry, every image a kind cluster of Kubernetes v1.37.2 needs, plus the
# Python base the gputopo images build on, from Debian packages (debootstrap) and the Go module proxy.
# Idempotent like hack/build-k8s.sh: each stage leaves a stamp and is skipped when its stamp matches.
#
#   hack/build-kind-node.sh            build what is missing; prints the node image's name on the last line
#
# Images it leaves in the local Docker engine:
#   gputopo/debian:bookworm             Debian bookworm minbase (kube-proxy's base)
#   gputopo/python:3.11-bookworm        Debian's python3 + venv, the stand-in for python:*-slim (PYTHON_IMAGE)
#   registry.k8s.io/kube-{apiserver,controller-manager,scheduler,proxy}:v1.37.2, etcd:3.7.0-0,
#   coredns/coredns:v1.14.6, pause:3.10 and :3.10.2   the images kubeadm expects, built from the pinned sources
#   gputopo/kind-node:v1.37.2           kind's node image, with all of the above preloaded into its containerd
#
# Needs root, a running Docker engine, debootstrap, jq, libseccomp-dev and pkg-config (hack/docker-engine.sh
# installs and starts what is missing), Go >= 1.26, and the Debian archive (DEBIAN_MIRROR).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.3.4}"
RUNC_VERSION="${RUNC_VERSION:-v1.4.3}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.6}"
SUITE="${DEBIAN_SUITE:-bookworm}"
CACHE="${GPUTOPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo}"
ROOT="$CACHE/kind-$KUBE_VERSION"
BIN="$ROOT/bin"
K8S_BIN="$CACHE/k8s-$KUBE_VERSION/bin"
STAMPS="$ROOT/stamps"
NODE_IMAGE="${KIND_NODE_IMAGE:-gputopo/kind-node:$KUBE_VERSION}"
PYTHON_IMAGE="${PYTHON_IMAGE:-gputopo/python:3.11-$SUITE}"
DEBIAN_IMAGE="gputopo/debian:$SUITE"
# The tags kubeadm v1.37.2 asks for (kubeadm config images list), and kind's containerd sandbox image.
ETCD_TAG=3.7.0-0
PAUSE_TAGS=(3.10 3.10.2)
mkdir -p "$BIN" "$STAMPS"

log() { printf '[kind-node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The Debian archive the host's apt already uses, unless DEBIAN_MIRROR says otherwise.
mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local found
  found=$(grep -rhoE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    awk '{print $2}' | head -n1 || true)
  echo "${found:-http://deb.debian.org/debian}"
}

stamp_ok() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
mark() { printf '%s' "$2" >"$STAMPS/$1"; }
image_ok() { docker image inspect "$1" >/dev/null 2>&1; }
timed() { # stage-name command...
  local t0=$SECONDS
  "${@:2}"
  log "$1: $((SECONDS - t0)) s"
}

preflight() {
  command -v go >/dev/null || die "the Go toolchain is not on PATH (Go >= 1.26)"
  [ "$(id -u)" = 0 ] || die "debootstrap and chroot need root"
  for tool in debootstrap jq pkg-config; do
    command -v "$tool" >/dev/null || die "$tool is missing: run hack/docker-engine.sh (or apt-get install debootstrap jq libseccomp-dev pkg-config)"
  done
  pkg-config --exists libseccomp || die "libseccomp-dev is missing (runc needs it): apt-get install libseccomp-dev"
  docker info >/dev/null 2>&1 || die "no Docker engine answers: run hack/docker-engine.sh"
}

# -- Go binaries ------------------------------------------------------------------------------------------------
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

go_install() { # name module@version [cgo] [tags]
  local name=$1 target=$2 cgo=${3:-0} tags=${4:-}
  stamp_ok "bin-$name" "$target" && [ -x "$BIN/$name" ] && return
  log "go install $target"
  CGO_ENABLED=$cgo GOBIN="$BIN" go install -trimpath -tags "$tags" -ldflags "-s -w" "$target"
  mark "bin-$name" "$target"
}

build_pause() {
  stamp_ok bin-pause 1 && [ -x "$BIN/pause" ] && return
  local src="$ROOT/src/pause"
  mkdir -p "$src"
  printf 'module gputopo.local/hack/pause\n\ngo 1.26\n' >"$src/go.mod"
  # The pod sandbox's only job: hold the namespaces until the kubelet stops it, and reap orphans.
  cat >"$src/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
GO
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/pause" .)
  mark bin-pause 1
}

build_binaries() {
  # kubelet, kubeadm, kube-proxy (and everything the sandbox uses) come from hack/build-k8s.sh.
  WITH_KIND=1 bash "$HERE/build-k8s.sh" >/dev/null
  go_install containerd "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" 0 \
    "no_btrfs no_devmapper no_zfs no_aufs urfave_cli_no_docs"
  go_install ctr "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" 0 "urfave_cli_no_docs"
  go_install containerd-shim-runc-v2 "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" 0
  go_install runc "github.com/opencontainers/runc@$RUNC_VERSION" 1 "seccomp urfave_cli_no_docs"
  go_install crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" 0
  go_install coredns "github.com/coredns/coredns@$COREDNS_VERSION" 0
  build_pause
}

# -- root file systems ------------------------------------------------------------------------------------------
NODE_PACKAGES=systemd,systemd-sysv,dbus,mount,iptables,nftables,conntrack,iproute2,kmod,libseccomp2,jq,procps,ca-certificates,containernetworking-plugins,ethtool,pigz,util-linux,e2fsprogs,bash,curl
PYTHON_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates

debootstrap_into() { # dir packages
  local dir=$1 packages=$2
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial"
  debootstrap --variant=minbase --include="$packages" "$SUITE" "$dir.partial" "$(mirror)" >"$dir.log" 2>&1 ||
    die "debootstrap into $dir failed; see $dir.log"
  # Nothing of the package caches or lists belongs in an image.
  rm -rf "$dir.partial"/var/cache/apt/archives/*.deb "$dir.partial"/var/lib/apt/lists/*
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
}

import_rootfs() { # dir image [docker import --change ...]
  local dir=$1 image=$2
  shift 2
  tar -C "$dir" --numeric-owner -c . | docker import "$@" - "$image" >/dev/null
}

build_debian_images() {
  local want="$SUITE $NODE_PACKAGES"
  if ! stamp_ok rootfs-node "$want" || ! image_ok "$DEBIAN_IMAGE"; then
    log "debootstrap $SUITE (node packages) from $(mirror)"
    timed "debootstrap node" debootstrap_into "$ROOT/rootfs/node" "$NODE_PACKAGES"
    import_rootfs "$ROOT/rootfs/node" "$DEBIAN_IMAGE" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    mark rootfs-node "$want"
  fi
  want="$SUITE $PYTHON_PACKAGES $(local_cas | sha256sum | cut -c1-16)"
  if ! stamp_ok rootfs-python "$want" || ! image_ok "$PYTHON_IMAGE"; then
    log "debootstrap $SUITE (python) from $(mirror)"
    timed "debootstrap python" debootstrap_into "$ROOT/rootfs/python" "$PYTHON_PACKAGES"
    trust_local_cas "$ROOT/rootfs/python"
    import_rootfs "$ROOT/rootfs/python" "$PYTHON_IMAGE" \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]'
    mark rootfs-python "$want"
  fi
}

local_cas() { cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; }

# pip inside an image build must trust what the host trusts: where a proxy inspects TLS, its CA is one of the
# host's local CA certificates. The Python base is a local stand-in and is never pushed anywhere.
trust_local_cas() { # rootfs
  local crt
  for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$crt" ] || continue
    mkdir -p "$1/usr/local/share/ca-certificates"
    install -m 0644 "$crt" "$1/usr/local/share/ca-certificates/"
  done
  chroot "$1" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in $1"
}

# -- kind's node image -------------------------------------------------------------------------------------------
kind_files() { # kind's own node files (images/base/files), from the kind module of the pinned version
  local dir
  dir=$(cd "$ROOT" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
  [ -d "$dir/images/base/files" ] || die "kind $KIND_VERSION has no images/base/files"
  echo "$dir/images/base/files"
}

node_rootfs() { # the node's root file system: Debian + kind's files + the pinned binaries, as kind's base image
  local r="$ROOT/rootfs/kind-node" files
  files=$(kind_files)
  rm -rf "$r" && cp -a "$ROOT/rootfs/node" "$r"
  cp -r "$files/." "$r/"
  chmod -R u+w,go-w "$r/kind" "$r/etc" "$r/usr/local/bin"
  find "$r/kind" "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" "$r/etc/systemd/system" -type f -exec chmod 0644 {} +
  chmod 0755 "$r"/usr/local/bin/* "$r"/kind/bin/* "$r/kind" "$r/kind/bin"
  # What kind's base Dockerfile does after installing its packages.
  find "$r/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$r/sbin/init"
  chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  chroot "$r" systemctl mask systemd-binfmt.service >/dev/null 2>&1
  mkdir -p "$r/etc/kubernetes/manifests" "$r/etc/cni/net.d" "$r/kind/manifests" "$r/usr/local/sbin"
  rm -rf "$r/opt/cni" && mkdir -p "$r/opt/cni" && ln -s /usr/lib/cni "$r/opt/cni/bin"
  install -m 0755 "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$K8S_BIN/kubectl" "$r/usr/bin/"
  install -m 0755 "$BIN/containerd" "$BIN/ctr" "$BIN/containerd-shim-runc-v2" "$BIN/crictl" "$r/usr/local/bin/"
  # containerd runs "runc" from PATH: the wrapper, which drops capabilities the host lacks (see the file).
  install -m 0755 "$BIN/runc" "$r/usr/local/sbin/runc.real"
  install -m 0755 "$HERE/kind/runc-bounded" "$r/usr/local/sbin/runc"
  "$BIN/ctr" oci spec |
    jq '.hooks.createContainer[.hooks.createContainer|length] |= .+{"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"$r/etc/containerd/cri-base.json"
  echo "$KUBE_VERSION" >"$r/kind/version"
  # Without CAP_SYS_RESOURCE nothing in the node may lower an oom_score_adj: containerd then raises a pod's to
  # its own instead of failing the pod (it does the same under user namespaces, where kind sets it).
  if ! has_capability 24; then
    sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$r/etc/containerd/config.toml"
  fi
  # kubelet 1.37 still refuses cgroup v1 unless told otherwise (failCgroupV1 defaults to true); these hosts run cgroup v1.
  sed -i 's|^KUBELET_EXTRA_ARGS=.*|& --fail-cgroupv1=false|' "$r/etc/default/kubelet"
  install -m 0644 "$HERE/kind/default-cni.yaml" "$r/kind/manifests/default-cni.yaml"
  import_rootfs "$r" gputopo/kind-base:"$SUITE" --change 'ENV container=docker' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
  rm -rf "$r"
}

has_capability() { # number: whether this host's bounding set has that capability (24: CAP_SYS_RESOURCE)
  local bounding=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  (((bounding >> $1) & 1))
}

binary_image() { # image binary [docker import --change ...]: one static binary and an empty /tmp
  local image=$1 binary=$2 stage
  shift 2
  stage=$(mktemp -d "$ROOT/stage.XXXXXX")
  mkdir -p "$stage/usr/local/bin" "$stage/tmp" "$stage/etc"
  chmod 1777 "$stage/tmp"
  install -m 0755 "$binary" "$stage/usr/local/bin/"
  echo 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$stage/etc/passwd"
  import_rootfs "$stage" "$image" --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' "$@"
  rm -rf "$stage"
}

cluster_images() { # the images kubeadm expects, under the names it asks for
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    binary_image "registry.k8s.io/$c:$KUBE_VERSION" "$K8S_BIN/$c"
  done
  binary_image "registry.k8s.io/etcd:$ETCD_TAG" "$K8S_BIN/etcd"
  binary_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$BIN/coredns" --change 'ENTRYPOINT ["/usr/local/bin/coredns"]'
  binary_image "registry.k8s.io/pause:${PAUSE_TAGS[0]}" "$BIN/pause" --change 'ENTRYPOINT ["/usr/local/bin/pause"]'
  for c in "${PAUSE_TAGS[@]:1}"; do docker tag "registry.k8s.io/pause:${PAUSE_TAGS[0]}" "registry.k8s.io/pause:$c"; done
  # kube-proxy programs iptables/nftables: it runs on Debian, which has both.
  docker rm -f gputopo-kube-proxy-build >/dev/null 2>&1 || true
  docker create --name gputopo-kube-proxy-build "$DEBIAN_IMAGE" true >/dev/null
  docker cp "$K8S_BIN/kube-proxy" gputopo-kube-proxy-build:/usr/local/bin/kube-proxy
  docker commit gputopo-kube-proxy-build "registry.k8s.io/kube-proxy:$KUBE_VERSION" >/dev/null
  docker rm -f gputopo-kube-proxy-build >/dev/null
}

preloaded_images() {
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do echo "registry.k8s.io/$c:$KUBE_VERSION"; done
  echo "registry.k8s.io/etcd:$ETCD_TAG"
  echo "registry.k8s.io/coredns/coredns:$COREDNS_VERSION"
  for c in "${PAUSE_TAGS[@]}"; do echo "registry.k8s.io/pause:$c"; done
  echo "$DEBIAN_IMAGE"
}

node_image() { # kind's node image: the base with every image preloaded into containerd, as kind does it
  local box=gputopo-kind-node-build
  docker rm -f "$box" >/dev/null 2>&1 || true
  docker run -d --name "$box" --entrypoint=sleep --security-opt seccomp=unconfined "gputopo/kind-base:$SUITE" infinity >/dev/null
  docker exec "$box" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  local i
  for i in $(seq 1 60); do
    docker exec "$box" ctr info >/dev/null 2>&1 && break
    [ "$i" = 60 ] && die "containerd did not start in the build container: $(docker exec "$box" cat /tmp/containerd.log)"
    sleep 1
  done
  # shellcheck disable=SC2046
  docker save $(preloaded_images) |
    docker exec -i "$box" ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
  docker exec "$box" pkill containerd
  for i in $(seq 1 30); do docker exec "$box" pgrep containerd >/dev/null || break; sleep 1; done
  docker exec "$box" rm -f /tmp/containerd.log
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$box" "$NODE_IMAGE" >/dev/null
  docker rm -f "$box" >/dev/null
}

build_node_image() {
  # Everything that goes into the node image, by content: a change to any of it rebuilds the image.
  local want
  want=$( {
    echo "$KUBE_VERSION $KIND_VERSION $CONTAINERD_VERSION $RUNC_VERSION $CRICTL_VERSION $COREDNS_VERSION $SUITE"
    grep CapBnd /proc/self/status
    cat "$STAMPS/rootfs-node" "$HERE/kind/default-cni.yaml" "$HERE/kind/runc-bounded" "${BASH_SOURCE[0]}"
  } | sha256sum | cut -c1-16)
  if stamp_ok node-image "$want" && image_ok "$NODE_IMAGE"; then
    log "node image $NODE_IMAGE: cached"
    return
  fi
  timed "node root file system" node_rootfs
  timed "cluster images" cluster_images
  timed "preload and commit" node_image
  docker image rm "gputopo/kind-base:$SUITE" >/dev/null
  mark node-image "$want"
}

main() {
  preflight
  local t0=$SECONDS
  timed "go binaries" build_binaries
  timed "debian images" build_debian_images
  timed "node image" build_node_image
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(gputopo/|registry.k8s.io/)" | sort >&2
  log "done in $((SECONDS - t0)) s"
  echo "$NODE_IMAGE"
}

# A stage name runs that stage alone (e.g. build_debian_images); no argument builds everything.
if [ $# -gt 0 ]; then preflight; "$@"; else main; fi
