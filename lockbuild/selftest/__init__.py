"""The self-test (issue 15): a signed bundle installed and run with the network removed, every attempt reported."""

from lockbuild.selftest.report import Attempt, Report, Step
from lockbuild.selftest.run import SelfTestOptions, self_test

__all__ = ["Attempt", "Report", "SelfTestOptions", "Step", "self_test"]
