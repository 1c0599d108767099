"""The mutation table: remove one security check at a time and see which test catches it.

Each entry of ``bench/mutation_table.py`` names a check, the file that holds it, the exact source text
that enforces it (it must occur exactly once), the text that neutralises it, and the tests that cover
the module. For each entry this script copies the file aside, writes the mutated file, runs the
selected tests with ``-x -q`` (no bytecode is written, so no stale ``.pyc`` outlives a mutation),
copies the original back (also on Ctrl-C or a timeout) and prints a Markdown table: the check, where
it is, and the first test that failed, or SURVIVED.

    .venv/bin/python -m bench.mutations                 # every entry
    .venv/bin/python -m bench.mutations --only 3,17     # some entries (1-based, as numbered in the table)
    .venv/bin/python -m bench.mutations --match delta   # entries whose check or file contains a word
    .venv/bin/python -m bench.mutations --check         # only check that every snippet occurs exactly once

It exits 1 when an entry survived (and is not marked equivalent), its snippet no longer matches, or its
run is no verdict: only a failing test counts as caught, never a snippet not found, a replacement that
leaves the file as it was or does not compile, a selection that names no test, pytest's usage error, a
crash or a timeout.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.mutation_table import ENTRIES, Mutation

ROOT = Path(__file__).resolve().parent.parent
_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.MULTILINE)
# what pytest's exit status says when it is not 0 (passed: the mutation survived) or 1 (a test failed)
_NOT_A_CATCH = {
    2: "pytest was interrupted (a collection error?)",
    3: "pytest's internal error",
    4: "pytest's usage error",
}


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    line: int | None  # 1-based line of the snippet's start in the original file
    # "caught", "SURVIVED", "equivalent", "matches" (--check), or an error: "NOT FOUND", "AMBIGUOUS", "ERROR", "timeout"
    result: str
    by: str  # the failing test, or a note
    seconds: float


def locate(text: str, snippet: str) -> tuple[int, int | None]:
    """How often SNIPPET occurs in TEXT, and the 1-based line where its only occurrence starts."""
    count = text.count(snippet)
    if count != 1:
        return count, None
    return 1, text[: text.index(snippet)].count("\n") + 1


def first_failure(output: str) -> str:
    found = _FAILED.search(output)
    if found:
        return found.group(1)
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:120] if tail else "(no output)"


def run_one(m: Mutation, timeout: float, root: Path = ROOT) -> Outcome:
    path = root / m.file
    original = path.read_text(encoding="utf-8")
    count, line = locate(original, m.find)
    if count != 1:
        return Outcome(m, None, "NOT FOUND" if count == 0 else "AMBIGUOUS", f"snippet occurs {count} times", 0.0)
    mutated = original.replace(m.find, m.replace, 1)
    if mutated == original:
        return Outcome(m, line, "ERROR", "the replacement leaves the file as it was", 0.0)
    if path.suffix == ".py":
        try:
            compile(mutated, str(path), "exec")
        except SyntaxError as e:
            return Outcome(m, line, "ERROR", f"the mutated file does not compile: {e.msg} (line {e.lineno})", 0.0)
    if m.equivalent:
        return Outcome(m, line, "equivalent", m.equivalent, 0.0)
    aside = Path(tempfile.mkdtemp(prefix="mutation-")) / path.name
    shutil.copy2(path, aside)  # the original, with its mtime, so its .pyc stays valid
    started = time.monotonic()
    try:
        path.write_text(mutated, encoding="utf-8")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *shlex.split(m.tests)]
        try:
            done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Outcome(m, line, "timeout", f"no result in {timeout:.0f} s", time.monotonic() - started)
    finally:
        shutil.copy2(aside, path)
        shutil.rmtree(aside.parent)
    took = time.monotonic() - started
    if done.returncode == 0:
        return Outcome(m, line, "SURVIVED", "", took)
    if done.returncode == 5:
        return Outcome(m, line, "NOT FOUND", "the selection collected no tests", took)
    if done.returncode != 1:  # only a failing test is a catch: not a usage error, a crash or a kill
        why = _NOT_A_CATCH.get(done.returncode, f"pytest exited {done.returncode}")
        return Outcome(m, line, "ERROR", f"{why}: {first_failure(done.stdout + done.stderr)}", took)
    return Outcome(m, line, "caught", first_failure(done.stdout + done.stderr), took)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(outcomes: list[Outcome], numbers: list[int]) -> str:
    rows = ["| # | check | file:line | caught by |", "|---|---|---|---|"]
    for n, o in zip(numbers, outcomes, strict=True):
        where = f"`{o.mutation.file}:{o.line}`" if o.line else f"`{o.mutation.file}`"
        if o.result == "caught":
            by = f"`{o.by}`"
        elif o.result == "equivalent":
            by = f"equivalent: {o.by}"
        elif o.result == "matches":
            by = "matches once"
        else:
            by = f"**{o.result}** {o.by}".rstrip()
        rows.append(f"| {n} | {cell(o.mutation.check)} | {where} | {cell(by)} |")
    rows.append("")
    rows.append(totals(outcomes))
    return "\n".join(rows)


def totals(outcomes: list[Outcome]) -> str:
    """The closing line: how many were caught, equivalent, survived, and how many could not be run."""
    count = {r: sum(o.result == r for o in outcomes) for r in ("caught", "equivalent", "SURVIVED", "matches")}
    errors = len(outcomes) - sum(count.values())
    if count["matches"]:
        return f"{count['matches']} of {len(outcomes)} snippets match once, {errors} do not."
    return (
        f"{count['caught']} of {len(outcomes)} caught, {count['equivalent']} equivalent, "
        f"{count['SURVIVED']} survived, {errors} errors (not found, ambiguous, not run or timed out)."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mutations", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated entry numbers (1-based)")
    ap.add_argument("--match", help="only entries whose check or file contains this text")
    ap.add_argument("--check", action="store_true", help="only check that every snippet matches once")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per entry (default 240)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still restores the file (finally)
    chosen = list(enumerate(ENTRIES, 1))
    if args.only:
        wanted = {int(x) for x in args.only.split(",")}
        chosen = [(n, m) for n, m in chosen if n in wanted]
    if args.match:
        chosen = [(n, m) for n, m in chosen if args.match in m.check or args.match in m.file]
    outcomes: list[Outcome] = []
    for n, m in chosen:
        if args.check:
            count, line = locate((ROOT / m.file).read_text(encoding="utf-8"), m.find)
            outcomes.append(
                Outcome(
                    m,
                    line,
                    "matches" if count == 1 else "NOT FOUND" if count == 0 else "AMBIGUOUS",
                    f"snippet occurs {count} times",
                    0.0,
                )
            )
        else:
            outcomes.append(run_one(m, args.timeout))
        o = outcomes[-1]
        print(
            f"[{n}/{len(ENTRIES)}] {o.result:9} {o.seconds:6.1f}s {m.file}:{o.line} {o.by}", file=sys.stderr, flush=True
        )
    print(table(outcomes, [n for n, _ in chosen]))
    return 0 if all(o.result in ("caught", "equivalent", "matches") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
