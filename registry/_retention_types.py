"""What retention hands back (``Registry.retain``, ``retention_policies``), and the checks and
duration strings both backends and the CLI share. Imports no database library: a registry
server's client reads these from its answers.

Times are unix seconds (float), ages and periods seconds.
"""

from __future__ import annotations

import dataclasses
import math

from jaxport import InvalidNameError
from jaxport.registry._names import check_count, check_name, check_seconds

__all__ = [
    "DEFAULT_RESTORE_PERIOD",
    "MAX_PERIOD",
    "RetentionDecision",
    "RetentionPlan",
    "RetentionPolicy",
    "check_policy",
    "format_duration",
    "parse_duration",
]

#: How long a version a retention run deleted can be restored, unless its policy says
#: otherwise: 14 days, in seconds.
DEFAULT_RESTORE_PERIOD = 14 * 86400.0
#: The longest age or restore period a policy may give: 100 years, in seconds (a date every
#: calendar can show; a longer period would make ``restorable_until`` a date no reader shows).
MAX_PERIOD = 100 * 365 * 86400.0

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Which versions of the names starting with ``prefix`` a retention run keeps: any that one
    rule keeps; the others are soft-deleted (restorable for ``restore_period``).

    A name follows the policy with the longest prefix it starts with; a name no policy covers
    is never touched. Every aliased version is kept, whatever the policy.

    Attributes:
        prefix: the name prefix (a valid name, e.g. ``team-a.`` or ``vision``).
        keep_last: keep each name's newest N versions (None: no such rule).
        keep_younger_than: keep versions pushed less than this many seconds ago (None: no
            such rule).
        keep_ok_per_target: keep, for each target (platform, device count, supported jax
            release), the newest version with a full audit ``ok`` there (``_retention``).
        restore_period: seconds a deleted version stays restorable (``Registry.restore``);
            ``gc`` removes it after that.
        created_at: when the policy was last set (unix seconds; 0 before it is stored).
    """

    prefix: str
    keep_last: int | None = None
    keep_younger_than: float | None = None
    keep_ok_per_target: bool = True
    restore_period: float = DEFAULT_RESTORE_PERIOD
    created_at: float = 0.0


@dataclasses.dataclass(frozen=True)
class RetentionDecision:
    """What a retention run does with one version.

    Attributes:
        name: the name.
        version: the version number.
        keep: whether it stays.
        rules: kept: each rule that keeps it (``last 3``, ``alias @prod``, ``protected alias
            @prod``, ``newest ok: cuda x1 jax 0.12.0``, ``younger than 30d``); deleted: why
            no rule does (``not among the last 3``, ``no alias``, ``newest ok for no
            supported target``, ``older than 30d``).
        policy: the prefix of the policy that decided.
        created_at: when the version was pushed (unix seconds).
        restorable_until: deleted by a real run: until when ``restore`` brings it back (unix
            seconds); None otherwise.
    """

    name: str
    version: int
    keep: bool
    rules: tuple[str, ...]
    policy: str
    created_at: float
    restorable_until: float | None = None


@dataclasses.dataclass(frozen=True)
class RetentionPlan:
    """A retention run's decisions, in ``(name, version)`` order.

    Attributes:
        dry_run: nothing was deleted (``deleted`` is what would go).
        prefix: the run was limited to names starting with this (None: every name a policy
            covers).
        deleted: the versions deleted (or, on a dry run, that would be).
        kept: the versions kept, each with the rules that keep it.
        at: when the plan was made (unix seconds): ages are measured from it.
    """

    dry_run: bool
    prefix: str | None
    deleted: tuple[RetentionDecision, ...]
    kept: tuple[RetentionDecision, ...]
    at: float


def check_policy(policy: object) -> RetentionPolicy:
    """``policy`` if it is a ``RetentionPolicy`` whose fields are valid.

    Raises:
        InvalidNameError: not a ``RetentionPolicy``; a prefix that is not a valid name; a
            ``keep_last`` that is not an int >= 1; an age or period that is not a number of
            seconds in 0 .. ``MAX_PERIOD``; a ``keep_ok_per_target`` that is not a bool.
    """
    if not isinstance(policy, RetentionPolicy):
        raise InvalidNameError(f"expected a jaxport.RetentionPolicy, got {type(policy).__name__}")
    check_name(policy.prefix, "prefix")
    if policy.keep_last is not None:
        check_count(policy.keep_last, "keep_last")
    if policy.keep_younger_than is not None:
        _check_period(policy.keep_younger_than, "keep_younger_than")
    _check_period(policy.restore_period, "restore_period")
    if not isinstance(policy.keep_ok_per_target, bool):
        raise InvalidNameError("keep_ok_per_target must be a bool")
    return policy


def _check_period(seconds: object, what: str) -> None:
    if check_seconds(seconds, what) > MAX_PERIOD:
        raise InvalidNameError(f"{what} is at most 100 years ({MAX_PERIOD:.0f} s), got {seconds}")


def parse_duration(text: str) -> float:
    """A duration such as ``30d``, ``12h``, ``90m``, ``45s`` or ``3600`` (seconds), in seconds.

    Raises:
        InvalidNameError: anything else, or a negative or infinite duration.
    """
    unit = text[-1:].lower()
    factor = dict(_UNITS).get(unit)
    number = text[:-1] if factor is not None else text
    try:
        value = float(number) * (factor or 1)
    except ValueError:
        raise InvalidNameError(
            f"expected a duration such as 30d, 12h, 90m or 3600, got {text[:40]!r}"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise InvalidNameError(f"a duration must be finite and >= 0, got {text[:40]!r}")
    return value


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it (``30d``, ``12h``), else seconds."""
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
