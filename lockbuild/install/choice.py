"""What a choice among builds is: each candidate, how it was judged, and the build chosen. Pure.

The rule that makes a :class:`Choice` is :func:`lockbuild.install.ranking.choose`; the I/O around it
(the candidates, each opened by the one trust decision first) is :mod:`lockbuild.install.choose`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockbuild.install.nodecheck import Needs
from lockbuild.text import one_line


@dataclass(frozen=True)
class Option:
    """One candidate build, from its signed manifest (or a catalogue recipe, for doctor)."""

    engine: str
    version: str
    variant: str
    needs: Needs
    serves: tuple[str, ...] = ()
    problem: str | None = None  # it could not be judged (its signatures do not meet the policy): never chosen
    newness: tuple[int, int] = (0, 0)  # the signed serial, then the signed build (as-of) time: newest wins a tie
    source: str = ""  # where it was found (a folder's file name), shown to the user and never ranked

    @property
    def build(self) -> str:
        return f"{self.engine}/{self.version}-{self.variant}"

    @property
    def is_gpu(self) -> bool:
        return self.needs.gpu is not None


@dataclass(frozen=True)
class Judged:
    option: Option
    fits: bool
    serves: str | None  # the asked version, where this build only serves it
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.option.build,
            "fits": self.fits,
            "serves": self.serves,
            "reasons": list(self.reasons),
            **({"source": self.option.source} if self.option.source else {}),
        }


@dataclass(frozen=True)
class Choice:
    asked: str  # ENGINE, or ENGINE/VERSION
    chosen: Option | None
    why: str  # why the chosen one, or why none
    candidates: tuple[Judged, ...]  # every candidate, the chosen one included
    fix: str = ""  # with nothing chosen: the driver to install, the variant to build, or --allow-cpu

    def to_json(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "chosen": self.chosen.build if self.chosen else None,
            "why": self.why,
            "candidates": [c.to_json() for c in self.candidates],
            "fix": self.fix or None,
        }

    def head(self) -> str:
        if self.chosen is None:
            return one_line(f"no build of {self.asked} fits: {self.why}")
        where = f" (from {self.chosen.source})" if self.chosen.source else ""
        return one_line(f"chose {self.chosen.build}: {self.why}{where}")

    def lines(self, *, fix: bool = True) -> list[str]:
        """The choice, then each other candidate and why it was passed over (then the fix, if asked)."""
        return [self.head(), *self.passed_over(fix=fix)]

    def passed_over(self, *, fix: bool = True) -> list[str]:
        out = []
        for c in self.candidates:
            if c.option is self.chosen:
                continue
            mark = "fits, passed over" if c.fits else "does not fit"
            via = f" (serves {c.serves})" if c.serves else ""
            where = f" ({c.option.source})" if c.option.source else ""
            out.append(one_line(f"  {c.option.build}{where}{via}: {mark}: {'; '.join(c.reasons)}"))
        if self.fix and fix:
            out.append(one_line(f"  fix: {self.fix}"))
        return out
