"""What the web pages show, read from a ``Registry`` for one token, and how it is rendered.

Each function here is one page's data: plain values and the registry's own result types, no
HTTP. ``render`` fills a Jinja2 template (``server/templates/``, autoescape on: every value a
page shows is escaped) into an HTML answer. A token limited to name prefixes sees the names,
variants, findings and events of its names only, as in the API.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

from jaxport import NotFoundError, __version__
from jaxport.audit import Finding, MatrixCell, matrix_cells, matrix_releases
from jaxport.registry import (
    DESCRIPTION_KEY,
    AliasMove,
    Event,
    Registry,
    TokenInfo,
    VariantInfo,
)
from jaxport.server import _event_view
from jaxport.server._markdown import render_markdown

__all__ = [
    "STATUS_CLASSES",
    "AliasChange",
    "EventRow",
    "MatrixRow",
    "NameRow",
    "VersionRow",
    "alias_moves",
    "css",
    "event_rows",
    "human_size",
    "iso_utc",
    "matrix_rows",
    "name_rows",
    "render",
    "version_findings",
    "version_rows",
    "visible_events",
]

#: The CSS class of each audit status in the matrix (``static/site.css`` colours them): ok
#: green, a measured failure red, a mismatch orange, not run grey, no finding blank.
STATUS_CLASSES = {
    "ok": "st-ok",
    "incompatible": "st-fail",
    "compile-error": "st-fail",
    "error": "st-fail",
    "crash": "st-fail",
    "mismatch": "st-mismatch",
    "not-run": "st-not-run",
    "unknown": "st-not-run",
    "not audited": "st-none",
}
#: The platforms the search form offers (``Exported.platforms``' names).
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
#: Variants read from the registry per query (``Registry.search`` pages).
_CHUNK = 10_000
#: Answer headers of every page: no script, no frame, no cache of a token's view.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def human_size(n: float) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``3.0 MiB``, ``2.0 GiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.0f} B" if i == 0 else f"{n:.1f} {units[i]}"


def iso_utc(seconds: float) -> str:
    """Unix seconds as ISO 8601 in UTC to the second, e.g. ``2026-11-22T14:03:07Z``."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jaxport.server", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        size=human_size, iso=iso_utc, json=lambda d: json.dumps(d, sort_keys=True),
        markdown=render_markdown,
    )  # fmt: skip
    env.globals.update(
        version=__version__, status_class=STATUS_CLASSES.get, description_key=DESCRIPTION_KEY,
        platforms=KNOWN_PLATFORMS,
    )  # fmt: skip
    return env


@functools.cache
def css() -> str:
    """``static/site.css``, the pages' one style sheet."""
    from importlib.resources import files

    return files("jaxport.server").joinpath("static/site.css").read_text("utf-8")


def render(template: str, status_code: int = 200, /, **context: Any) -> HTMLResponse:
    """``template`` filled with ``context``, as an HTML answer with the pages' headers."""
    html = _environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status_code, headers=_HEADERS)


# -- the pages' data ------------------------------------------------------------------------


def _variants(reg: Registry, name: str) -> list[VariantInfo]:
    """Every variant of ``name``, oldest first (``Registry.search``, a page at a time)."""
    found: list[VariantInfo] = []
    while True:
        after = found[-1].variant_id if found else None
        page = reg.search(name=name, limit=_CHUNK, after=after)
        found += page
        if len(page) < _CHUNK:
            return found


def _by_version(variants: Iterable[VariantInfo]) -> dict[int, list[VariantInfo]]:
    versions: dict[int, list[VariantInfo]] = {}
    for v in variants:
        versions.setdefault(v.version, []).append(v)
    return versions


@dataclasses.dataclass(frozen=True)
class NameRow:
    """A name on the index: its newest version, how many versions it has, its aliases."""

    name: str
    newest: int
    versions: int
    kind: str
    aliases: dict[str, int]


def name_rows(reg: Registry, names: Iterable[str]) -> list[NameRow]:
    """The index rows of ``names`` (a name whose versions are all gone is left out)."""
    rows = []
    for name in names:
        versions = _by_version(_variants(reg, name))
        if versions:
            newest = max(versions)
            kind = versions[newest][0].kind
            rows.append(NameRow(name, newest, len(versions), kind, reg.aliases(name)))
    return rows


@dataclasses.dataclass(frozen=True)
class VersionRow:
    """A version on its name's page: its variants and, by digest, the signers' short
    fingerprints of each (``Registry.signatures``; stored, not verified)."""

    version: int
    created_at: float
    kind: str
    variants: tuple[VariantInfo, ...]
    signers: dict[str, list[str]]


def version_rows(
    reg: Registry, name: str, *, page: int, per_page: int
) -> tuple[list[VersionRow], int]:
    """One page (1-based) of ``name``'s versions, newest first, and how many versions it has.

    Raises:
        NotFoundError: no such name.
    """
    reg.aliases(name)  # NotFoundError for an unknown name, as every other name page
    versions = _by_version(_variants(reg, name))
    numbers = sorted(versions, reverse=True)[(page - 1) * per_page : page * per_page]
    rows = []
    for number in numbers:
        variants = tuple(versions[number])
        signers: dict[str, list[str]] = {}
        for s in reg.signatures(f"{name}:{number}"):
            signers.setdefault(s.digest, []).append(s.short_signer)
        created = min(v.created_at for v in variants)
        rows.append(VersionRow(number, created, variants[0].kind, variants, signers))
    return rows, len(versions)


def alias_moves(reg: Registry, name: str) -> list[AliasMove]:
    """Every move of ``name``'s aliases, newest first."""
    return list(reversed(reg.alias_history(name)))


def version_findings(reg: Registry, name: str, version: int) -> list[Finding]:
    """The newest finding of each variant of ``name:version`` per platform, jax release and
    check level, newest first."""
    seen: set[tuple[str, str, str, str]] = set()
    found = []
    for f in reg.audit_results(name=name, limit=1_000_000):
        key = (f.digest, f.platform, f.jax_version, f.level)
        if f.version == version and key not in seen:
            seen.add(key)
            found.append(f)
    return found


@dataclasses.dataclass(frozen=True)
class MatrixRow:
    """A matrix row: one variant (``name:version``, short digest) on one platform, with one
    cell per jax release."""

    name: str
    version: int
    short_digest: str
    platform: str
    cells: tuple[MatrixCell, ...]


def matrix_rows(
    findings: Sequence[Finding], principal: TokenInfo
) -> tuple[list[str], list[MatrixRow]]:
    """The audit matrix of ``findings`` (newest first) that ``principal`` may see: the jax
    releases (oldest first) and the rows (``jaxport.audit.matrix_cells``, as ``jaxport audit
    --matrix``)."""
    visible = [f for f in findings if principal.allows_name(f.name)]
    releases = matrix_releases(visible)
    cells = matrix_cells(visible)
    rows = []
    for i in range(0, len(cells), len(releases) or 1):
        row = tuple(cells[i : i + len(releases)])
        first = row[0]
        rows.append(MatrixRow(first.name, first.version, first.short_digest, first.platform, row))
    return releases, rows


def visible_events(events: Sequence[Event], principal: TokenInfo) -> list[Event]:
    """The events ``principal`` may see: all, or those of its names (as the API's), other
    names in them hidden (``server/_event_view.py``)."""
    return _event_view.visible_events(events, principal)


@dataclasses.dataclass(frozen=True)
class AliasChange:
    """An alias an event moved: from ``before`` to ``after`` (None: it had none / removed)."""

    alias: str
    before: int | None
    after: int | None


@dataclasses.dataclass(frozen=True)
class EventRow:
    """An event as the events page shows it: ``what`` in words and the aliases it moved."""

    event: Event
    what: str
    aliases: tuple[AliasChange, ...]


def event_rows(reg: Registry, events: Sequence[Event]) -> list[EventRow]:
    """``events`` in words. An alias event (and a push that moved aliases) records the alias
    and where it now points; where it pointed before is read from the name's alias history:
    the newest move of that alias to that version made no later than the event (both are
    written in one transaction, the move first)."""
    histories: dict[str, list[AliasMove]] = {}
    rows = []
    for e in events:
        moved: list[str] = []
        if e.kind == "alias":
            moved = [str(e.detail.get("alias", ""))]
        elif e.kind == "push":
            moved = [str(a) for a in e.detail.get("aliases", [])]
        changes = tuple(_alias_change(reg, histories, e, alias) for alias in moved)
        rows.append(EventRow(e, _what(e), changes))
    return rows


def _alias_change(
    reg: Registry, histories: dict[str, list[AliasMove]], e: Event, alias: str
) -> AliasChange:
    if e.name is None:
        return AliasChange(alias, None, e.version)
    if e.name not in histories:
        try:
            histories[e.name] = reg.alias_history(e.name)
        except NotFoundError:  # the name was deleted since
            histories[e.name] = []
    for move in reversed(histories[e.name]):
        if move.alias == alias and move.to_version == e.version and move.moved_at <= e.at:
            return AliasChange(alias, move.from_version, move.to_version)
    return AliasChange(alias, None, e.version)


def _what(e: Event) -> str:
    d = e.detail
    if e.kind == "push":
        digests = d.get("digests", [])
        if d.get("created", True):
            return f"pushed {len(digests)} variant{'' if len(digests) == 1 else 's'}"
        return f"repaired {len(d.get('repaired', []))} blob(s) of an existing version"
    if e.kind == "alias":
        if e.version is None:
            return "removed an alias"
        override = d.get("override")
        if isinstance(override, dict):  # a protected alias moved past failed gates
            return f"moved an alias, overriding its gates: {override.get('reason')}"
        return "moved a protected alias (its gates passed)" if d.get("gates") else "moved an alias"
    if e.kind in ("protect", "unprotect"):
        return f"{e.kind}ed @{d.get('alias')}"
    if e.kind == "delete":
        return "deleted (forced)" if d.get("force") else "deleted"
    if e.kind == "gc":
        return f"collected {d.get('removed', 0)} blob(s), {human_size(d.get('bytes', 0) or 0)}"
    if e.kind == "sign":
        return "signed by " + ", ".join(map(str, d.get("signers", [])))
    if e.kind == "token-create":
        prefixes = d.get("prefixes") or []
        limit = f", names {' '.join(map(str, prefixes))}*" if prefixes else ""
        expires = d.get("expires_at")
        until = f", until {iso_utc(expires)}" if isinstance(expires, int | float) else ""
        return f"created token {d.get('token')} ({d.get('scope')}{limit}{until})"
    if e.kind == "token-revoke":
        return f"revoked token {d.get('token')}"
    return e.kind
