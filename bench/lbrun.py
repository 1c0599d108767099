"""``python -m bench.lbrun ARGS``: the lockbuild CLI, in this process, which at exit writes its own peak RSS
(RUSAGE_SELF: this process only, not the uv it runs) to the file named by $BENCH_SELF_RSS.

Two switches for ``bench/fetchcost.py`` only (lockbuild itself has no such setting): $BENCH_COUNT_READINGS
names a file that gets one line per archive whose GPU code is read, and BENCH_NO_GPU_READING=1 reads none
(every archive is left unread and the build's fit is not measured): the same fetch without the reading.
"""

from __future__ import annotations

import atexit
import os
import resource
import sys
from typing import Any


def report_self_rss() -> None:
    path = os.environ.get("BENCH_SELF_RSS")
    if path:
        with open(path, "w") as f:
            f.write(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\n")


def patch_reading() -> None:
    off, count = os.environ.get("BENCH_NO_GPU_READING") == "1", os.environ.get("BENCH_COUNT_READINGS")
    if not off and not count:
        return
    import lockbuild.builder.gpufit as gpufit
    import lockbuild.fetch.kernelcache as kernelcache

    real = kernelcache.read_archive

    def read_archive(f: Any, name: str, label: str | None = None) -> Any:
        if count:
            with open(count, "a") as out:
                out.write(name + "\n")
        return None if off else real(f, name, label)

    kernelcache.read_archive = read_archive
    if off:
        gpufit.measured_and_filled = lambda plan, cache: (plan, gpufit.Measured(None, ("reading switched off",)))


if __name__ == "__main__":
    atexit.register(report_self_rss)
    patch_reading()
    from lockbuild.cli import main

    main(sys.argv[1:], prog_name="lockbuild")
