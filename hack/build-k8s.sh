#!/usr/bin/env bash
# Builds the pinned Kubernetes, etcd, kwok, helm (and optionally kind) binaries from the Go module proxy
# into a cache outside the repository. Idempotent: a binary that exists with the right version stamp is kept.
#
#   hack/build-k8s.sh            build what is missing, print the bin directory on the last line
#   WITH_KIND=1 hack/build-k8s.sh   also build kind and the node components kind's node image needs
#                                   (kubelet, kubeadm, kube-proxy); hack/build-kind-node.sh uses this
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
CACHE="${GPUTOPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo}"
ROOT="$CACHE/k8s-$KUBE_VERSION"
BIN="$ROOT/bin"
WORK="$ROOT/src"
mkdir -p "$BIN" "$WORK"

log() { printf '[hack] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "error: the Go toolchain is not on PATH. Install Go >= 1.26 (https://go.dev/doc/install or 'apt-get install golang') and rerun."
  exit 3
fi

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

stamp_ok() { # name version
  [ -x "$BIN/$1" ] && [ -f "$BIN/.$1.version" ] && [ "$(cat "$BIN/.$1.version")" = "$2" ]
}
mark() { printf '%s' "$2" >"$BIN/.$1.version"; }

build_kubernetes() {
  local need=() components=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  if [ "${WITH_KIND:-0}" = "1" ]; then components+=(kubelet kubeadm kube-proxy); fi
  for c in "${components[@]}"; do
    stamp_ok "$c" "$KUBE_VERSION" || need+=("$c")
  done
  [ "${#need[@]}" -eq 0 ] && { log "kubernetes $KUBE_VERSION: cached"; return; }
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local patch="${KUBE_VERSION##*.}"
  local staging="v0.$minor.$patch"
  local mod="$WORK/kubernetes"
  mkdir -p "$mod"
  log "kubernetes $KUBE_VERSION: resolving module (staging modules at $staging)"
  local gomod
  gomod=$(cd "$mod" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module gputopo.local/hack/kubernetes"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # Every staging module that k8s.io/kubernetes requires at v0.0.0 is replaced by its published version.
    grep -E '^[[:space:]]+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  log "kubernetes $KUBE_VERSION: go mod tidy (downloads modules on a cold cache)"
  (cd "$mod" && go mod tidy)
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld="-s -w"
  for key in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $key.gitVersion=$KUBE_VERSION -X $key.gitMajor=1 -X $key.gitMinor=$minor"
    ld="$ld -X $key.gitTreeState=clean -X $key.buildDate=$date -X $key.gitCommit=0000000000000000000000000000000000000000"
  done
  # One go build for all of them: shared packages compile once and the links run in parallel.
  local pkgs=() t0=$SECONDS
  for c in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "kubernetes $KUBE_VERSION: building ${need[*]}"
  (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$BIN/" "${pkgs[@]}")
  for c in "${need[@]}"; do mark "$c" "$KUBE_VERSION"; done
  log "kubernetes $KUBE_VERSION: ${need[*]} built in $((SECONDS - t0)) s"
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && { log "etcd $ETCD_VERSION: cached"; return; }
  local mod="$WORK/etcd"
  mkdir -p "$mod"
  printf 'module gputopo.local/hack/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$mod/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$mod/tools.go"
  log "etcd $ETCD_VERSION: go mod tidy"
  (cd "$mod" && go mod tidy)
  log "etcd $ETCD_VERSION: building"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
  mark etcd "$ETCD_VERSION"
}

go_install() { # name module version
  stamp_ok "$1" "$3" && { log "$1 $3: cached"; return; }
  log "$1 $3: go install $2@$3"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "$2@$3"
  mark "$1" "$3"
}

t_start=$SECONDS
build_etcd
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
go_install kwokctl sigs.k8s.io/kwok/cmd/kwokctl "$KWOK_VERSION"
go_install helm helm.sh/helm/v4/cmd/helm "$HELM_VERSION"
build_kubernetes
if [ "${WITH_KIND:-0}" = "1" ]; then go_install kind sigs.k8s.io/kind "$KIND_VERSION"; fi
cat >"$ROOT/versions.env" <<ENV
KUBE_VERSION=$KUBE_VERSION
ETCD_VERSION=$ETCD_VERSION
KWOK_VERSION=$KWOK_VERSION
HELM_VERSION=$HELM_VERSION
KIND_VERSION=$KIND_VERSION
ENV
log "done in $((SECONDS - t_start)) s; cache $(du -sh "$ROOT" | cut -f1) at $ROOT"
echo "$BIN"
