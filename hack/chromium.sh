#!/usr/bin/env bash
# Makes sure Debian's headless Chromium is here, for the live map's browser test
# (tests/integration/test_map_browser.py drives it over the DevTools protocol). Installs the `chromium` package
# when no chromium is on PATH; needs root and Debian's apt.
set -euo pipefail
log() { printf '[chromium] %s\n' "$*" >&2; }
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "error: no chromium on PATH, and installing it needs root (apt-get install chromium)"; exit 1; }
log "apt-get install chromium"
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
