#!/usr/bin/env bash
# Copies the generated CRDs (crds/*.yaml, from `python -m gputopo.api.crdgen`) into the Helm chart, which
# templates them (charts/gputopo/templates/crds.yaml). tests/integration/test_chart_crds.py fails when the two
# copies differ, so run this after regenerating crds/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/crds"
dst="$root/charts/gputopo/files/crds"
mkdir -p "$dst"
shopt -s nullglob
files=("$src"/*.yaml)
if [ "${#files[@]}" -eq 0 ]; then
  echo "sync-chart-crds: no CRDs in $src; run 'python -m gputopo.api.crdgen' first" >&2
  exit 1
fi
# Drop copies of CRDs that no longer exist, then copy the current ones byte for byte.
for old in "$dst"/*.yaml; do
  [ -e "$src/$(basename "$old")" ] || rm -f -- "$old"
done
cp -- "${files[@]}" "$dst/"
echo "sync-chart-crds: ${#files[@]} CRD file(s) copied to ${dst#"$root"/}"
