"""The self-test: a signed bundle installed and run with the network removed, every attempt reported.

The names below load on first use, so that ``lockbuild.cli`` (which registers ``lockbuild test``) does not
import the self-test's machinery for every other command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockbuild.selftest.report import Attempt, Report, Step
    from lockbuild.selftest.run import SelfTestOptions, self_test

__all__ = ["TIMEOUT", "Attempt", "Report", "SelfTestOptions", "Step", "self_test"]
TIMEOUT = 1800.0  # seconds the verify command and the smoke command may each take
_HOME = {"Attempt": "report", "Report": "report", "Step": "report", "SelfTestOptions": "run", "self_test": "run"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"lockbuild.selftest.{_HOME[name]}"), name)
    raise AttributeError(f"module 'lockbuild.selftest' has no attribute {name!r}")
