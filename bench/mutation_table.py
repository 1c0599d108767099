"""The entries of the mutation table (``python -m bench.mutations``): one security check each.

``find`` is the exact source text that enforces the check (it must occur once in ``file``);
``replace`` neutralises it; ``tests`` are the pytest arguments that cover the module, kept small so
each entry runs in seconds. ``equivalent`` marks a mutation that does not change behaviour, with why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    check: str
    file: str
    find: str
    replace: str
    tests: str
    equivalent: str = ""


def off(check: str, file: str, condition: str, tests: str) -> Mutation:
    """The check ``if CONDITION:`` never fires."""
    return Mutation(check, file, f"if {condition}:", "if False:", tests)


ENTRIES: list[Mutation] = [
    # --- site/sources.py: DeltaFile -----------------------------------------------------------------
    off("a delta's head and manifest are bounded before they are read", "lockbuild/site/sources.py",
        "h.size > limit", "tests/test_delta_bounds.py"),
    off("a delta's manifest is bounded before it is read (bundle.toml)", "lockbuild/site/sources.py",
        "h.size > limit", "tests/test_delta_bounds.py -k manifest"),
    # --- site/storemodel.py, site/store.py: kept signatures --------------------------------------
    Mutation("kept signatures: at most MAX_SIGNATURES blocks", "lockbuild/site/storemodel.py",
             "len(out) == MAX_SIGNATURES or ", "", "tests/test_kept_signatures.py"),
    Mutation("kept signatures: at most max_signature_file bytes", "lockbuild/site/storemodel.py",
             " or size + len(text.encode()) > limits.max_signature_file", "", "tests/test_kept_signatures.py"),
    Mutation("the store's kept blocks are bounded on read", "lockbuild/site/store.py",
             "SIGNATURE_FILE, self.limits.max_signature_file,", "SIGNATURE_FILE, 1 << 40,",
             "tests/test_kept_signatures.py -k read"),
    # --- site/registry.py: pull -------------------------------------------------------------------
    Mutation("a pulled blob is read no further than its signed size", "lockbuild/site/registry.py",
             "if have > m.size:\n                    break", "if False:\n                    break",
             "tests/test_pull_bounds.py"),
    Mutation("a pulled blob longer than signed is refused", "lockbuild/site/registry.py",
             "    if have > m.size:\n        remove_at(", "    if False:\n        remove_at(",
             "tests/test_pull_bounds.py"),
    # --- bundle/bootstrap.sh ----------------------------------------------------------------------
    Mutation("the bootstrap installs the lock with --require-hashes", "lockbuild/bundle/bootstrap.sh",
             "--no-index --require-hashes --no-build", "--no-index --no-build", "tests/test_bootstrap_hashes.py"),
]
