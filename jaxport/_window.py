"""jax's 6-month backward-compatibility window for exports, as data; where an artifact stands.

The rule is jax's; it is recorded here with where it comes from:

- **The promise** (https://docs.jax.dev/en/latest/export/export.html#compatibility-guarantees,
  the page jax's own refusal message cites): jax deserializes and runs an ``Exported`` for
  ``WINDOW_MONTHS`` = 6 months after it was serialized, and not necessarily after that.
- **The enforcement** (``jax/_src/export/serialization.py``: ``_expired_error_msg``,
  ``_deserialize_exported``, ``_deserialize_sharding``; present in jax 0.11.1, 0.11.2, 0.12.0
  and 0.12.0.1, absent in 0.11.0 and older): since ``ENFORCED_SINCE`` = 0.11.1,
  ``jax.export.deserialize`` refuses with "Exported being deserialized seems to be older than
  the 6-month backward-compatibility window" the bytes of

  * every export written by jax older than 0.8.2 (``NATIVE_MIN_RELEASE``): their device count
    is only in the 16-bit ``nr_devices_short`` field (serialization version < 5, 2025-11-23;
    ``JAX_EXPORT_DESERIALIZE_EXPIRED_VERSIONS=1`` lifts this one, with a DeprecationWarning);
  * every export with an input or output sharding written by jax older than 0.9.0
    (``NATIVE_MIN_SHARDED_RELEASE``): their shardings are only in the HloSharding form
    (serialization version < 6, 2026-01-15).

  jax writes the release into its bytes only since serialization version 12 (2026-07-29), and
  a truthful serialization version only since 2026-07-27, so it checks the structure instead.
- **The date.** A jaxport archive records the jax release that wrote it (the header's
  ``Producer.jax_version``), not when: its export date is taken as that release's first upload
  to PyPI (``JAX_RELEASE_DATES``, the earliest it can have been written), and its window ends
  ``WINDOW_MONTHS`` calendar months later. A jax release published after that day no longer
  promises to run it.

jaxport reads its own format with its own decoder (``jax.export.deserialize`` is never called
on a jaxport archive), so such an archive still loads; ``loads(..., outside_window=...)``
decides whether that warns (``OutsideJaxWindowWarning``, the default), is refused
(``OutsideJaxWindowError``) or passes silently. Whether it still *runs* is what an audit
measures.
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime
import functools
import importlib.metadata
import sys
import warnings

from jaxport._errors import OutsideJaxWindowError, OutsideJaxWindowWarning

__all__ = [
    "ENFORCED_SINCE",
    "JAX_RELEASE_DATES",
    "NATIVE_MIN_RELEASE",
    "NATIVE_MIN_SHARDED_RELEASE",
    "OUTSIDE_WINDOW_POLICIES",
    "WINDOW_MONTHS",
    "WINDOW_SOURCE",
    "JaxWindow",
    "check_window",
    "jax_window",
    "release_date",
    "release_key",
]

#: How long jax promises to deserialize and run an export, in calendar months.
WINDOW_MONTHS = 6
#: The page that states the promise (cited by jax's own refusal message).
WINDOW_SOURCE = "https://docs.jax.dev/en/latest/export/export.html#compatibility-guarantees"
#: The first jax release whose ``jax.export.deserialize`` refuses expired exports.
ENFORCED_SINCE = "0.11.1"
#: Exports written by an older jax are refused by ``deserialize`` from ``ENFORCED_SINCE`` on.
NATIVE_MIN_RELEASE = "0.8.2"
#: Exports with a sharding written by an older jax are refused likewise.
NATIVE_MIN_SHARDED_RELEASE = "0.9.0"
#: The values ``loads(..., outside_window=...)`` takes.
OUTSIDE_WINDOW_POLICIES = ("warn", "refuse", "allow")

#: Each jax release's first upload to PyPI (UTC date), from https://pypi.org/pypi/jax/json
#: (``releases[v][*].upload_time_iso_8601``, the earliest file), read 2026-11-26. A release
#: missing here has no known date: its window is "unknown" (tests/test_window.py fails when
#: the installed jax, or one scripts/test_jax_versions.sh tests, is missing).
JAX_RELEASE_DATES: dict[str, str] = {
    "0.4.30": "2024-06-18",
    "0.4.31": "2024-07-30",
    "0.4.32": "2024-09-11",
    "0.4.33": "2024-09-16",
    "0.4.34": "2024-10-04",
    "0.4.35": "2024-10-22",
    "0.4.36": "2024-12-05",
    "0.4.37": "2024-12-10",
    "0.4.38": "2024-12-17",
    "0.5.0": "2025-01-17",
    "0.5.1": "2025-02-24",
    "0.5.2": "2025-03-05",
    "0.5.3": "2025-03-19",
    "0.6.0": "2025-04-17",
    "0.6.1": "2025-05-21",
    "0.6.2": "2025-06-17",
    "0.7.0": "2025-07-22",
    "0.7.1": "2025-08-20",
    "0.7.2": "2025-09-16",
    "0.8.0": "2025-10-15",
    "0.8.1": "2025-11-18",
    "0.8.2": "2025-12-18",
    "0.8.3": "2026-01-29",
    "0.9.0": "2026-01-20",
    "0.9.0.1": "2026-02-05",
    "0.9.1": "2026-03-02",
    "0.9.2": "2026-03-18",
    "0.10.0": "2026-04-16",
    "0.10.1": "2026-05-20",
    "0.10.2": "2026-06-17",
    "0.11.0": "2026-07-16",
    "0.11.1": "2026-08-17",
    "0.11.2": "2026-09-17",
    "0.12.0": "2026-10-19",
    "0.12.0.1": "2026-10-21",
}


@dataclasses.dataclass(frozen=True)
class JaxWindow:
    """Where an artifact stands in jax's backward-compatibility window (dates are ISO 8601
    ``YYYY-MM-DD``, UTC; None where unknown).

    Attributes:
        jax_version: the jax release that wrote the artifact (``"unknown"`` when not recorded).
        released: that release's date on PyPI: the earliest the artifact can have been written.
        window_ends: the last day jax promises to run it (``released`` + 6 months); a jax
            published after it may refuse its jax-native form.
        running_jax: the jax installed here.
        within_window: whether the running jax was published on or before ``window_ends``
            (None: a date is unknown). False: jax no longer promises to run it here.
        jax_deserialize: what the running jax's own ``jax.export.deserialize`` does with this
            artifact's jax-native form (as its producer would have serialized it), by jax's
            rule: ``"accepts"``, ``"refuses"`` or ``"unknown"`` (producer not recorded). A
            jaxport archive never goes through it.
        last_known_release: the newest jax release an audit found it ``ok`` under, or None
            (no such audit; ``jaxport.inspect`` has no audits).
    """

    jax_version: str
    released: str | None
    window_ends: str | None
    running_jax: str
    within_window: bool | None
    jax_deserialize: str
    last_known_release: str | None = None


def release_key(version: str) -> tuple[int, ...]:
    """A sort key for dotted release strings ("0.10.2" > "0.9.2"; "1.10.0" > "1.9.3" for
    StableHLO versions); non-numeric parts sort first. Imports nothing."""
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def release_date(version: str) -> datetime.date | None:
    """The jax release's first upload to PyPI (``JAX_RELEASE_DATES``), or None: not known."""
    text = JAX_RELEASE_DATES.get(version.strip())
    return datetime.date.fromisoformat(text) if text else None


def _running_date(version: str) -> datetime.date | None:
    """The running jax's date; one newer than every known release was published on or after
    the newest known date, the most that can be said of it."""
    known = release_date(version)
    if known is not None:
        return known
    newest = max(JAX_RELEASE_DATES, key=release_key)
    return release_date(newest) if release_key(version) > release_key(newest) else None


def _add_months(day: datetime.date, months: int) -> datetime.date:
    """``day`` plus calendar months, clamped to the month's last day (08-31 + 6 -> 02-28)."""
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    return datetime.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _running_jax() -> str:
    """The jax this process runs: the imported one's version, else the installed one's
    (without importing jax)."""
    version = getattr(sys.modules.get("jax"), "__version__", None)
    return version if isinstance(version, str) else _installed_jax()


@functools.cache
def _installed_jax() -> str:
    """The installed jax's version, read from its package metadata once per process (about
    1 ms a read: every push and ``inspect`` asks)."""
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def jax_window(jax_version: str, *, sharded: bool, running: str | None = None) -> JaxWindow:
    """Where an artifact written by jax ``jax_version`` stands in jax's window (module doc).

    Args:
        jax_version: the producer's jax release, as the archive header records it.
        sharded: whether any input or output has a sharding (jax's HloSharding rule).
        running: the jax to judge against (default: the installed one).

    Returns:
        The dates, whether the running jax is still within the window, and what its own
        ``deserialize`` does with the artifact's jax-native form. Nothing is measured here.
    """
    running = running or _running_jax()
    released = release_date(jax_version)
    ends = _add_months(released, WINDOW_MONTHS) if released else None
    running_date = _running_date(running)
    within = None if ends is None or running_date is None else running_date <= ends
    return JaxWindow(
        jax_version=jax_version,
        released=released.isoformat() if released else None,
        window_ends=ends.isoformat() if ends else None,
        running_jax=running,
        within_window=within,
        jax_deserialize=_native_verdict(jax_version, sharded=sharded, running=running),
    )


def _native_verdict(jax_version: str, *, sharded: bool, running: str) -> str:
    if release_key(running) < release_key(ENFORCED_SINCE):
        return "accepts"
    if not jax_version or not jax_version[0].isdigit():
        return "unknown"
    oldest = NATIVE_MIN_SHARDED_RELEASE if sharded else NATIVE_MIN_RELEASE
    return "refuses" if release_key(jax_version) < release_key(oldest) else "accepts"


def check_window(window: JaxWindow, policy: str, *, path: str | None = None) -> None:
    """Applies ``loads(..., outside_window=policy)`` to an artifact outside the window.

    Args:
        window: the artifact's (``jax_window``).
        policy: ``"warn"`` (an ``OutsideJaxWindowWarning``), ``"refuse"`` or ``"allow"``.
        path: the file, for messages.

    Raises:
        OutsideJaxWindowError: ``policy == "refuse"`` and ``window.within_window`` is False.
        ValueError: an unknown policy.
    """
    if policy not in OUTSIDE_WINDOW_POLICIES:
        raise ValueError(f"outside_window must be one of {OUTSIDE_WINDOW_POLICIES}, not {policy!r}")
    if window.within_window is not False or policy == "allow":
        return
    native = (
        "its own deserialize refuses this export's jax-native form"
        if window.jax_deserialize == "refuses"
        else "its own deserialize may refuse this export's jax-native form"
    )
    message = (
        f"{path + ': ' if path else ''}written by jax {window.jax_version} "
        f"(released {window.released}), outside jax's {WINDOW_MONTHS}-month backward-"
        f"compatibility window since {window.window_ends}: jax {window.running_jax} no longer "
        f"promises to run it and {native}; jaxport reads it from its own format (an audit "
        f"measures whether it still runs; {WINDOW_SOURCE})"
    )
    if policy == "refuse":
        raise OutsideJaxWindowError(message, window=window, path=path)
    warnings.warn(message, OutsideJaxWindowWarning, stacklevel=3)
