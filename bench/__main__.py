"""Run every benchmark in bench/ (``python -m bench``, or ``python -m bench topology placement``).

Each ``bench/bench_*.py`` is a script that writes its JSON and Markdown report into ``bench/reports/``.
Benchmarks that need the sandbox start it themselves.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(word in s.stem for word in argv)]
    failed = []
    for script in scripts:
        t0 = time.monotonic()
        print(f"== {script.name}", flush=True)
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"== {script.name}: exit {rc} after {time.monotonic() - t0:.1f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
