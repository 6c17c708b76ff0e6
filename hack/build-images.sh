#!/usr/bin/env bash
# Builds gputopo's images into the local Docker engine: gputopo-operator, gputopo-probe and gputopo-allreduce,
# and gputopo/kueue:<Kueue version> (Kueue's manager from hack/build-kueue.sh, which this runs: instant once built).
#
#   hack/build-images.sh [TAG]      (default TAG: dev; the Kueue image is tagged with Kueue's version)
#
# The base is PYTHON_IMAGE: by default the local stand-in that hack/build-kind-node.sh builds from Debian
# (gputopo/python:3.11-bookworm) when it exists, else the Dockerfiles' own python:*-slim. Each build context holds
# only what its Dockerfile copies, sent as a tar, so the legacy builder (no BuildKit here) sends no more than
# BuildKit would with the Dockerfile's .dockerignore. The Python dependencies come from each image's hash-locked
# requirements.txt (hack/lock-requirements.sh), fetched from the package index pip is configured with.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${1:-dev}"
STANDIN="gputopo/python:3.11-bookworm"
if [ -z "${PYTHON_IMAGE:-}" ] && docker image inspect "$STANDIN" >/dev/null 2>&1; then PYTHON_IMAGE="$STANDIN"; fi
args=()
[ -n "${PYTHON_IMAGE:-}" ] && args=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
export DOCKER_BUILDKIT=0  # BuildKit would pull the '# syntax=' frontend image

built() { # image:tag t0
  printf '[images] %s built in %d s (%s)\n' "$1" "$((SECONDS - $2))" \
    "$(docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}')" >&2
}

build() { # image context-dir dockerfile [more paths of the context, relative to context-dir]
  local image=$1 dir=$2 dockerfile=$3 t0=$SECONDS
  shift 3
  tar -C "$dir" --exclude=__pycache__ --exclude='*.pyc' --exclude=.mypy_cache -c "$dockerfile" "$@" |
    docker build -q -f "$dockerfile" "${args[@]}" -t "$image:$TAG" - >/dev/null
  built "$image:$TAG" "$t0"
}

# Kueue's manager: the context is its Dockerfile and the cached binary. The image carries the binary's digest as a
# label, so a binary built again is a new image and an unchanged one sends no 87 MB context to the engine.
build_kueue() {
  local t0=$SECONDS kueue version image digest
  kueue=$(bash "$ROOT/hack/build-kueue.sh")
  version=$(cat "$kueue/bin/.kueue.version")
  image="gputopo/kueue:$version"
  digest=$(sha256sum "$kueue/bin/kueue" | cut -d' ' -f1)
  if [ "$(docker image inspect -f '{{index .Config.Labels "io.gputopo.kueue.sha256"}}' "$image" 2>/dev/null)" != "$digest" ]; then
    tar -C "$ROOT/images/kueue" -c Dockerfile -C "$kueue/bin" kueue |
      docker build -q --label "io.gputopo.kueue.sha256=$digest" -t "$image" - >/dev/null
  fi
  built "$image" "$t0"
}

build gputopo-operator "$ROOT" images/operator/Dockerfile images/operator/requirements.txt pyproject.toml README.md \
  operator node-probe
build gputopo-probe "$ROOT" images/probe/Dockerfile images/probe/requirements.txt pyproject.toml README.md \
  operator node-probe
build gputopo-allreduce "$ROOT/images/allreduce" Dockerfile allreduce.py
build_kueue
