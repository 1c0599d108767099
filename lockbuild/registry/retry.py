"""When to ask a registry again (pure): an answer, the attempt and the clock in, a decision out.

A busy registry (429, 502, 503, 504) is asked again after its ``Retry-After`` or a jittered backoff
(:func:`decide`); a cut blob is asked for the rest (:func:`resume`); every request stops after
``retry_seconds`` (``LOCKBUILD_REGISTRY_RETRY_SECONDS``; 0 asks nothing again), never hanging a command."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lockbuild.registry.reference import RegistryError
from lockbuild.wire.headers import retry_after_seconds

RETRYABLE = frozenset({429, 502, 503, 504})
RETRY_ENV = "LOCKBUILD_REGISTRY_RETRY_SECONDS"


@dataclass(frozen=True)
class RetryPolicy:
    retry_seconds: float = 90.0  # the most one request spends being asked again, from its first attempt
    max_retry_after: float = 60.0  # the longest Retry-After obeyed
    base_seconds: float = 0.5  # the first backoff without Retry-After ...
    max_backoff: float = 8.0  # ... doubling up to this
    max_resumes: int = 5  # a blob whose answer broke off mid-body is asked for the rest this many times


DEFAULT_RETRY = RetryPolicy()


def with_budget(policy: RetryPolicy, value: str | None) -> RetryPolicy:
    """``policy`` with ``retry_seconds`` from ``value`` (``LOCKBUILD_REGISTRY_RETRY_SECONDS``, read by the
    CLI): seconds from 0 to 3600; None keeps it."""
    if value is None:
        return policy
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise RegistryError(
            f"{RETRY_ENV}={value[:40]!r} is not a number of seconds from 0 to 3600.",
            tip=f"Unset {RETRY_ENV} for the default ({policy.retry_seconds:g} s), or give e.g. 300.",
        )
    return dataclasses.replace(policy, retry_seconds=seconds)


@dataclass(frozen=True)
class Answer:
    """What the registry said: the status and its ``Retry-After`` header, if any."""

    status: int
    retry_after: str | None = None


@dataclass(frozen=True)
class Moment:
    """The clock as the decision needs it: seconds since the request's first attempt, and the wall
    clock (seconds since the epoch, for a ``Retry-After`` given as a date)."""

    elapsed: float
    wall: float


@dataclass(frozen=True)
class RetryDecision:
    """``wait`` seconds, then ask again; or, with ``wait`` None, give up (``why`` says why)."""

    wait: float | None
    why: str = ""

    @property
    def again(self) -> bool:
        return self.wait is not None


def backoff(attempt: int, policy: RetryPolicy, jitter: float) -> float:
    """The wait after ``attempt`` (1: the first answer) refused answers: exponential, capped, with half of
    it random (``jitter`` in [0, 1))."""
    full = min(policy.max_backoff, policy.base_seconds * 2.0 ** min(max(attempt - 1, 0), 30))
    return full / 2 + full / 2 * min(max(jitter, 0.0), 1.0)


def decide(
    answer: Answer, attempt: int, moment: Moment, policy: RetryPolicy = DEFAULT_RETRY, jitter: float = 0.5
) -> RetryDecision:
    """Whether to ask again after the refused ``answer`` to the ``attempt``-th try, and after how long.

    Only 429, 502, 503 and 504 are asked again. The wait is ``max(backoff, min(Retry-After, cap))``: the
    registry's ``Retry-After`` (seconds or an HTTP date) is obeyed up to ``max_retry_after``, never shorter
    than the backoff, so ``Retry-After: 0`` cannot make it ask at once; a wait that would end past
    ``retry_seconds`` from the first attempt is not begun, so a throttling registry never hangs a command."""
    if answer.status not in RETRYABLE:
        return RetryDecision(None, f"HTTP {answer.status} is not an answer to ask again")
    asked = retry_after_seconds(answer.retry_after, moment.wall)
    wait = backoff(attempt, policy, jitter)  # never less: "Retry-After: 0" is no licence to ask at once
    if asked is not None:
        wait = max(wait, min(asked, policy.max_retry_after))
    left = policy.retry_seconds - moment.elapsed
    if moment.elapsed + wait > policy.retry_seconds:
        if asked is not None and asked > left:
            return RetryDecision(
                None,
                f"it asked to wait {asked:.0f} s (Retry-After), past the {policy.retry_seconds:g} s "
                "this request may spend being asked again",
            )
        return RetryDecision(
            None,
            f"it kept refusing for {moment.elapsed:.1f} s ({attempt} attempts), the most this "
            f"request may spend being asked again is {policy.retry_seconds:g} s",
        )
    return RetryDecision(wait)


def resume(attempt: int, moment: Moment, policy: RetryPolicy = DEFAULT_RETRY, jitter: float = 0.5) -> RetryDecision:
    """Whether to ask for the rest of a blob whose answer broke off for the ``attempt``-th time."""
    if attempt > policy.max_resumes:
        return RetryDecision(None, f"its answer broke off {attempt} times")
    wait = backoff(attempt, policy, jitter)
    if moment.elapsed + wait > policy.retry_seconds:
        return RetryDecision(None, f"its answer broke off again after {moment.elapsed:.1f} s of asking")
    return RetryDecision(wait)
