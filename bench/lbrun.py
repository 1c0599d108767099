"""``python -m bench.lbrun ARGS``: the lockbuild CLI, in this process, which at exit writes its own peak RSS
(RUSAGE_SELF: this process only, not the uv it runs) to the file named by $BENCH_SELF_RSS."""

from __future__ import annotations

import atexit
import os
import resource
import sys


def report_self_rss() -> None:
    path = os.environ.get("BENCH_SELF_RSS")
    if path:
        with open(path, "w") as f:
            f.write(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\n")


if __name__ == "__main__":
    atexit.register(report_self_rss)
    from lockbuild.cli import main

    main(sys.argv[1:], prog_name="lockbuild")
