#!/usr/bin/env bash
# Builds the pinned Kueue manager from the Go module proxy into a cache outside the repository and copies its CRDs
# and webhook configurations (config/components/crd/bases, config/components/webhook) beside it, for
# `gputopo sandbox up --kueue`, and the module's whole kustomize tree (config/), from which the kind end-to-end
# test renders Kueue's release manifests (config/default, as Kueue's `make artifacts` does). Idempotent: a
# manager with the right version stamp, and files of the same version, are kept.
#
#   hack/build-kueue.sh      build what is missing, print the Kueue directory (bin/kueue, crds/, webhook/, config/) last
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
CACHE="${GPUTOPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo}"
ROOT="$CACHE/kueue-$KUEUE_VERSION"
BIN="$ROOT/bin"
CRDS="$ROOT/crds"
WEBHOOK="$ROOT/webhook"
CONFIG="$ROOT/config"
MODULE=sigs.k8s.io/kueue

log() { printf '[hack] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "error: the Go toolchain is not on PATH. Install Go >= 1.26 (https://go.dev/doc/install or 'apt-get install golang') and rerun."
  exit 3
fi

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

stamp_ok() { # file stamp version
  [ -e "$1" ] && [ -f "$2" ] && [ "$(cat "$2")" = "$3" ]
}

t_start=$SECONDS
if stamp_ok "$BIN/kueue" "$BIN/.kueue.version" "$KUEUE_VERSION" && stamp_ok "$CRDS" "$CRDS/.version" "$KUEUE_VERSION" &&
  stamp_ok "$CONFIG" "$CONFIG/.version" "$KUEUE_VERSION"; then
  log "kueue $KUEUE_VERSION: cached"
  echo "$ROOT"
  exit 0
fi
mkdir -p "$BIN"

# The module's source directory, downloaded on a cold module cache; -mod=mod lets it resolve outside any module.
log "kueue $KUEUE_VERSION: downloading the module"
dir=$(cd "$ROOT" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$dir/config/components/crd/bases" ] || { log "error: $MODULE@$KUEUE_VERSION has no config/components/crd/bases"; exit 1; }

if ! stamp_ok "$BIN/kueue" "$BIN/.kueue.version" "$KUEUE_VERSION"; then
  # go.mod of sigs.k8s.io/kueue has no replace directive, so `go install module@version` builds it as released.
  ld="-s -w -X $MODULE/pkg/version.GitVersion=$KUEUE_VERSION"
  ld="$ld -X $MODULE/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  log "kueue $KUEUE_VERSION: go install $MODULE/cmd/kueue@$KUEUE_VERSION (downloads modules on a cold cache)"
  t0=$SECONDS
  GOBIN="$BIN" go install -trimpath -ldflags "$ld" "$MODULE/cmd/kueue@$KUEUE_VERSION"
  printf '%s' "$KUEUE_VERSION" >"$BIN/.kueue.version"
  log "kueue $KUEUE_VERSION: manager built in $((SECONDS - t0)) s"
fi

rm -rf "$CRDS" "$WEBHOOK" "$CONFIG"
mkdir -p "$CRDS" "$WEBHOOK"
cp "$dir"/config/components/crd/bases/*.yaml "$CRDS/"
cp "$dir"/config/components/webhook/manifests.yaml "$dir"/config/components/webhook/kustomization.yaml "$WEBHOOK/"
cp -R "$dir/config" "$CONFIG"
chmod -R u+w "$CRDS" "$WEBHOOK" "$CONFIG"
# The stamps are written last: a copy cut short is done again on the next run.
printf '%s' "$KUEUE_VERSION" >"$CONFIG/.version"
printf '%s' "$KUEUE_VERSION" >"$CRDS/.version"
log "kueue $KUEUE_VERSION: done in $((SECONDS - t_start)) s; cache $(du -sh "$ROOT" | cut -f1) at $ROOT"
echo "$ROOT"
