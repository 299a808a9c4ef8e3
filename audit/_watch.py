"""The jax-release watcher's two halves that need no database: reading a package index for jax
and jaxlib releases, and judging a variant against a release that is not installed.

**The index** (``read_releases``) is the one pip is configured with (``index_url``): the
``--index-url`` given, else ``$PIP_INDEX_URL``, else ``index-url`` of ``pip config list``,
else https://pypi.org/simple/. It is read through the JSON simple API (PEP 691:
``Accept: application/vnd.pypi.simple.v1+json``, ``GET INDEX/PACKAGE/``) with httpx, with a
deadline and a cap on the answer's size, and checked in a fixed order: status 200 → the JSON
content type → at most ``MAX_ANSWER_BYTES`` → a JSON object → ``meta.api-version`` 1.x →
``files`` a list of at most ``MAX_FILES`` objects → each file's name parses as a wheel or an
sdist of that package (``packaging``) → ``upload-time`` ISO 8601 where given. Anything else,
or an index that cannot be reached, is a ``PackageIndexError`` (an ``AuditError``; HTTP 502
through a registry server) naming the index (without user info) and what was wrong. A release
is its files' version; it is yanked when every file is, pre- or dev-release as ``packaging`` says.

**The judgement** (``release_verdict``) is the static audit (``_static.static_verdict``) with
the release's own capabilities where its audit environment is ready (the registry asks one
worker there), else capabilities projected from the installed jax's (``projected_capabilities``):
what a release number decides without installing it. The same reader (an audit environment
installs this jaxport), the installed jax's platforms and custom-call targets (a newer jaxlib
keeps what an older one registers: the full audit measures it), the calling conventions the
installed jax runs and any newer one (a newer jax never runs fewer; jax keeps old ones for at
least the 6-month window), and jax's HloSharding rule by release number (read from 0.11.1 on:
``_window.ENFORCED_SINCE``). Then the window: a variant whose 6-month window
(``_window.jax_window``) ends before the release's upload day *expires* under it. A variant a
re-export would save (expired, or refused for HloSharding-only shardings) needs *rescue*.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from jaxport import AuditError, PackageIndexError
from jaxport._window import ENFORCED_SINCE, jax_window, release_date
from jaxport.audit._report import AuditResult
from jaxport.audit._static import Capabilities, Facts, static_verdict

__all__ = [
    "DEFAULT_INDEX",
    "MAX_ANSWER_BYTES",
    "MAX_FILES",
    "IndexRelease",
    "ReleaseVerdict",
    "index_url",
    "newer_releases",
    "projected_capabilities",
    "read_releases",
    "release_day",
    "release_verdict",
    "shown_url",
]

#: pip's default index.
DEFAULT_INDEX = "https://pypi.org/simple/"
#: The largest answer read from an index for one package, in bytes (PyPI's jaxlib page: ~4 MB).
MAX_ANSWER_BYTES = 64 * 2**20
#: The most files one package's answer may list.
MAX_FILES = 200_000
#: Seconds one index request may take, connecting and reading.
TIMEOUT = 30.0
_ACCEPT = "application/vnd.pypi.simple.v1+json"
#: Outcomes of ``release_verdict``.
OUTCOMES = ("ok", "expires", "refused")


@dataclasses.dataclass(frozen=True)
class IndexRelease:
    """A release of ``package`` (``jax`` or ``jaxlib``) on the index: ``uploaded_at`` its
    earliest file's upload time (unix seconds; None: the index does not say), ``yanked`` every
    file is, ``prerelease`` a pre- or dev-release."""

    package: str
    version: str
    uploaded_at: float | None
    yanked: bool
    prerelease: bool


@dataclasses.dataclass(frozen=True)
class ReleaseVerdict:
    """What a release says of one variant: ``outcome`` one of ``ok`` (nothing recorded refuses
    it and the release is inside its window: a full audit decides), ``expires`` (its window,
    ``window_ends``, ended before the release) or ``refused`` (a static refusal on one of its
    platforms, ``reason``); ``rescue``: a re-export would save it (expired, or HloSharding-only
    shardings)."""

    outcome: str
    reason: str
    window_ends: str | None
    rescue: bool


def index_url(explicit: str | None = None) -> str:
    """The index to read: ``explicit``, else pip's configuration (module docstring).

    Raises:
        AuditError: ``pip config list`` could not run within 30 s.
    """
    if explicit:
        return explicit
    from_env = os.environ.get("PIP_INDEX_URL", "").split()
    if from_env:
        return from_env[0]
    return _pip_config_index() or DEFAULT_INDEX


def _pip_config_index() -> str | None:
    """``index-url`` from ``pip config list`` (install's before global's), or None."""
    import subprocess

    from jaxport import _children

    try:
        done = _children.run([sys.executable, "-m", "pip", "config", "list"], timeout=30.0)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AuditError(f"`pip config list` failed: {type(e).__name__}") from None
    found: dict[str, str] = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.strip().rpartition(".")
        urls = value.strip().strip("'\"").split()
        if option == "index-url" and urls:
            found[section] = urls[0]
    return found.get("install") or found.get("global") or found.get(":env:")


def shown_url(url: str) -> str:
    """``url`` without user info, query or fragment (an index URL may carry a password)."""
    try:
        parsed = httpx.URL(url)
    except Exception:
        return "<index>"
    if not (parsed.scheme and parsed.host):  # not a URL: as given, unless it may hold a secret
        return "<index>" if "@" in url else url[:200]
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


def read_releases(
    url: str, package: str, *, client: httpx.Client | None = None
) -> list[IndexRelease]:
    """The releases of ``package`` that the index at ``url`` lists, oldest first.

    Args:
        url: the index's root (``https://pypi.org/simple/``); ``http`` or ``https``.
        package: ``jax`` or ``jaxlib``.
        client: an httpx client to use (default: one for this call, ``TIMEOUT`` seconds).

    Raises:
        AuditError: ``url`` is not an http(s) URL with a host.
        PackageIndexError: the index cannot be reached, or answered anything but a PEP 691
            page within the limits (module docstring): the message names the index and the
            fault.
    """
    try:
        parsed: httpx.URL | None = httpx.URL(url)
    except httpx.InvalidURL:  # e.g. http://[::1
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        shown = shown_url(url)
        got = "one that does not parse" if shown == "<index>" else repr(shown)
        raise AuditError(
            f"the package index must be an http(s) URL such as https://pypi.org/simple/, got {got}"
        )
    where = f"the package index {shown_url(url)}"
    page = url.rstrip("/") + f"/{package}/"
    own = client is None
    client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
    try:
        body = _fetch(client, page, where)
    finally:
        if own:
            client.close()
    return _releases(_document(body, where), package, where)


def _fetch(client: httpx.Client, page: str, where: str) -> bytes:
    try:
        with client.stream("GET", page, headers={"Accept": _ACCEPT}) as answer:
            if answer.status_code != 200:
                raise PackageIndexError(
                    f"{where} answered HTTP {answer.status_code} for {shown_url(page)}"
                )
            kind = answer.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != _ACCEPT:
                raise PackageIndexError(
                    f"{where} does not speak the JSON simple API (PEP 691): content type "
                    f"{kind[:60]!r}, not {_ACCEPT}"
                )
            return _bounded(answer.iter_bytes(), where)
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise PackageIndexError(f"{where} cannot be read: {type(e).__name__}") from None


def _bounded(chunks: Iterator[bytes], where: str) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise PackageIndexError(f"{where} answered more than {MAX_ANSWER_BYTES:,} bytes")
    return bytes(body)


def _document(body: bytes, where: str) -> list[dict[str, Any]]:
    """The ``files`` of a PEP 691 answer, checked (module docstring's order)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise PackageIndexError(f"{where} answered JSON that does not parse") from None
    if not isinstance(data, dict):
        raise PackageIndexError(f"{where} answered {type(data).__name__}, not a JSON object")
    meta = data.get("meta")
    version = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(version, str) or version.split(".")[0] != "1":
        raise PackageIndexError(f"{where} answered API version {str(version)[:20]!r}, not 1.x")
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise PackageIndexError(f"{where} answered no list of file objects")
    if len(files) > MAX_FILES:
        raise PackageIndexError(f"{where} listed {len(files):,} files, more than {MAX_FILES:,}")
    return files


def _releases(files: list[dict[str, Any]], package: str, where: str) -> list[IndexRelease]:
    from packaging.version import Version

    found: dict[Version, tuple[float | None, bool]] = {}
    for entry in files:
        version = _file_version(entry.get("filename"), package, where)
        if version is None:
            continue
        uploaded = _upload_time(entry.get("upload-time"), where)
        yanked = entry.get("yanked", False) not in (False, None)
        first, all_yanked = found.get(version, (None, True))
        if first is None or (uploaded is not None and uploaded < first):
            first = uploaded
        found[version] = (first, all_yanked and yanked)
    return [
        IndexRelease(package, str(v), at, yanked, v.is_prerelease or v.is_devrelease)
        for v, (at, yanked) in sorted(found.items())
    ]


def _file_version(filename: Any, package: str, where: str) -> Any:
    """A file's version (``packaging.version.Version``); None for a file of another kind
    (``.egg``, ``.zip``, a metadata file).

    Raises:
        PackageIndexError: not a string, or a wheel/sdist name of another package or that
            does not parse.
    """
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        canonicalize_name,
        parse_sdist_filename,
        parse_wheel_filename,
    )
    from packaging.version import InvalidVersion

    if not isinstance(filename, str) or len(filename) > 300:
        raise PackageIndexError(f"{where} listed a file without a usable filename")
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        raise PackageIndexError(
            f"{where} listed a file named {filename[:80]!r} that does not parse"
        ) from None
    if name != canonicalize_name(package):
        raise PackageIndexError(f"{where} listed {filename[:80]!r} on the page of {package}")
    return version


def _upload_time(value: Any, where: str) -> float | None:
    if value is None:
        return None
    try:
        text = str(value)[:40].replace("Z", "+00:00")
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise PackageIndexError(f"{where} gave an upload-time that is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def newer_releases(
    listed: list[IndexRelease], seen: set[str], *, prereleases: bool = False, yanked: bool = False
) -> list[IndexRelease]:
    """The releases of ``listed`` (oldest first) newer than every one of ``seen``, pre-releases
    and yanked ones left out unless asked; with nothing seen, the newest one alone (the first
    watch audits against the current release, not the history)."""
    from packaging.version import InvalidVersion, Version

    wanted = [r for r in listed if (prereleases or not r.prerelease) and (yanked or not r.yanked)]
    known = []
    for v in seen:
        try:
            known.append(Version(v))
        except InvalidVersion:
            continue
    if not known:
        return wanted[-1:]
    newest = max(known)
    return [r for r in wanted if Version(r.version) > newest]


def projected_capabilities(
    base: Capabilities, release: str, newest_convention: int
) -> Capabilities:
    """``base`` (the installed jax's, ``_static.capabilities``) projected to jax ``release``
    (module docstring); ``newest_convention``: the newest calling convention any variant has,
    which a release newer than ``base``'s is not said to refuse."""
    from packaging.version import Version

    if release == base.jax_version:
        return base
    lo, hi = base.calling_convention_range
    if Version(release) > Version(base.jax_version):
        hi = max(hi, newest_convention)
    return dataclasses.replace(
        base,
        jax_version=release,
        jaxlib_version=release,
        calling_convention_range=(lo, hi),
        reads_hlo_shardings=Version(release) < Version(ENFORCED_SINCE),
        stablehlo_range=None,  # another jaxlib's: not known without its environment
    )


def release_day(release: str, uploaded_at: float | None, seen_at: float) -> datetime.date:
    """The day a release was published: the index's upload time, else jax's table
    (``_window.JAX_RELEASE_DATES``), else the day it was seen."""
    if uploaded_at is not None:
        return datetime.datetime.fromtimestamp(uploaded_at, datetime.UTC).date()
    known = release_date(release)
    if known is not None:
        return known
    return datetime.datetime.fromtimestamp(seen_at, datetime.UTC).date()


def release_verdict(facts: Facts, caps: Capabilities, day: datetime.date) -> ReleaseVerdict:
    """What the release of ``caps`` (published on ``day``) says of the variant of ``facts``
    on each of its platforms (``facts.platforms``); never raises for odd facts."""
    for platform in facts.platforms or ("cpu",):
        result: AuditResult = static_verdict(facts, platform, caps)
        if result.status == "incompatible":
            return ReleaseVerdict("refused", result.reason, None, "shardings" in result.checks)
    writer = facts.jax_version or "unknown"
    ends = None
    if writer != "unknown":
        ends = jax_window(writer, sharded=bool(facts.sharded), running=caps.jax_version).window_ends
    if ends is not None and day.isoformat() > ends:
        reason = f"jax {caps.jax_version} ({day}) is past its window (ended {ends})"
        return ReleaseVerdict("expires", reason, ends, True)
    return ReleaseVerdict("ok", "", ends, False)
