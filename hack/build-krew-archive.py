#!/usr/bin/env python3
"""Build the krew archive of ``kubectl gputopo`` (``dist/kubectl-gputopo.tar.gz``: the launcher in
``plugins/krew``), byte for byte the same on every machine, and write its sha256 into the krew manifest
``plugins/gputopo.yaml``. Install from the checkout with

    kubectl krew install --manifest=plugins/gputopo.yaml --archive=dist/kubectl-gputopo.tar.gz

``--check`` only says whether the manifest's sha256 is the archive's (exit 1 when not)."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "plugins" / "krew" / "kubectl-gputopo"
MANIFEST = ROOT / "plugins" / "gputopo.yaml"
ARCHIVE = ROOT / "dist" / "kubectl-gputopo.tar.gz"


def archive_bytes() -> bytes:
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = LAUNCHER.read_bytes()
        info = tarfile.TarInfo("kubectl-gputopo")
        info.size, info.mode, info.mtime, info.uname, info.gname = len(data), 0o755, 0, "root", "root"
        tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(tar_buffer.getvalue())
    return out.getvalue()


def main() -> int:
    data = archive_bytes()
    digest = hashlib.sha256(data).hexdigest()
    text = MANIFEST.read_text()
    written = re.findall(r"sha256: ([0-9a-f]{64})", text)
    if sys.argv[1:] == ["--check"]:
        if written and all(d == digest for d in written):
            return 0
        print(f"{MANIFEST}: sha256 is not the archive's {digest}; run hack/build-krew-archive.py", file=sys.stderr)
        return 1
    ARCHIVE.parent.mkdir(exist_ok=True)
    ARCHIVE.write_bytes(data)
    MANIFEST.write_text(re.sub(r"sha256: [0-9a-f]{64}", f"sha256: {digest}", text))
    print(f"{ARCHIVE} sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
