#!/usr/bin/env bash
# Builds gputopo's images into the local Docker engine: gputopo-operator, gputopo-probe and gputopo-allreduce.
#
#   hack/build-images.sh [TAG]      (default TAG: dev)
#
# The base is PYTHON_IMAGE: by default the local stand-in that hack/build-kind-node.sh builds from Debian
# (gputopo/python:3.11-bookworm) when it exists, else the Dockerfiles' own python:*-slim. Each build context holds
# only what its Dockerfile copies, sent as a tar, so the legacy builder (no BuildKit here) sends no more than
# BuildKit would with the Dockerfile's .dockerignore.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${1:-dev}"
STANDIN="gputopo/python:3.11-bookworm"
if [ -z "${PYTHON_IMAGE:-}" ] && docker image inspect "$STANDIN" >/dev/null 2>&1; then PYTHON_IMAGE="$STANDIN"; fi
args=()
[ -n "${PYTHON_IMAGE:-}" ] && args=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
export DOCKER_BUILDKIT=0  # BuildKit would pull the '# syntax=' frontend image

build() { # image context-dir dockerfile [more paths of the context, relative to context-dir]
  local image=$1 dir=$2 dockerfile=$3 t0=$SECONDS
  shift 3
  tar -C "$dir" --exclude=__pycache__ --exclude='*.pyc' --exclude=.mypy_cache -c "$dockerfile" "$@" |
    docker build -q -f "$dockerfile" "${args[@]}" -t "$image:$TAG" - >/dev/null
  printf '[images] %s:%s built in %d s (%s)\n' "$image" "$TAG" "$((SECONDS - t0))" \
    "$(docker image inspect -f '{{.Size}}' "$image:$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')" >&2
}

build gputopo-operator "$ROOT" images/operator/Dockerfile pyproject.toml README.md operator node-probe
build gputopo-probe "$ROOT" images/probe/Dockerfile pyproject.toml README.md operator node-probe
build gputopo-allreduce "$ROOT/images/allreduce" Dockerfile allreduce.py
