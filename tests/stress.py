"""`make test-stress`: the suites that start whole stacks, run beside a CPU hog on every core.

A suite that passes only on an idle machine fails on a busy laptop or a shared CI runner, and then people stop
running it. This runs the given suites (the system and browser ones, from the Makefile) while one process per
core spins at the same priority as the tests, so waits that assume a fast machine and timed assertions show
up here first. BERTH_CPU_HOGS sets how many hogs (one per core by default): `make chaos` runs two.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys


def _spin() -> None:
    while True:
        pass


def main(suites: list[str]) -> int:
    count = int(os.environ.get("BERTH_CPU_HOGS") or os.cpu_count() or 2)
    hogs = [multiprocessing.Process(target=_spin, daemon=True, name=f"cpu-hog-{i}") for i in range(count)]
    for hog in hogs:
        hog.start()
    print(f"running {' '.join(suites)} beside {len(hogs)} CPU hog(s)", flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "pytest", "-q", "--durations=15", *suites])
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(timeout=5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tests/system", "tests/browser"]))
