#!/usr/bin/env bash
# Writes the hash-locked requirements the images install with `pip install --require-hashes`:
#   images/operator/requirements.txt   the distribution's dependencies ([project] dependencies of pyproject.toml)
#   images/probe/requirements.txt      the probe's only (the "probe" extra)
# each with the build backend pyproject.toml names (setuptools, wheel): the images build gputopo itself without
# build isolation, so nothing unhashed is fetched at build time. Every file of each pinned version is hashed, so
# one lock serves the Dockerfiles' python:3.12 base and hack/build-kind-node.sh's Debian python 3.11 stand-in.
#
#   hack/lock-requirements.sh          (needs pip-tools, `pip install pip-tools`, and the package index)
#
# Run it after changing a dependency in pyproject.toml and commit the result; tests/unit/test_image_locks.py fails
# while a lock misses a dependency or pins one without hashes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v pip-compile >/dev/null || { echo "pip-compile is missing: pip install pip-tools" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$ROOT/pyproject.toml" "$work" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
build = project["build-system"]["requires"]
wanted = {
    "operator": project["project"]["dependencies"],
    "probe": project["project"]["optional-dependencies"]["probe"],
}
for image, requirements in wanted.items():
    with open(f"{sys.argv[2]}/{image}.in", "w") as out:
        out.write("\n".join([*requirements, *build]) + "\n")
PY
for image in operator probe; do
  (cd "$work" && pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-header \
    --output-file "$image.txt" "$image.in")
  {
    echo "# The $image image's Python dependencies, hash-locked: written by hack/lock-requirements.sh from"
    echo "# pyproject.toml; installed with pip install --require-hashes (images/$image/Dockerfile). Do not edit."
    cat "$work/$image.txt"
  } >"$ROOT/images/$image/requirements.txt"
  echo "[lock] images/$image/requirements.txt: $(grep -c '^[a-zA-Z]' "$ROOT/images/$image/requirements.txt") pins" >&2
done
