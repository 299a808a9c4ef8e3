"""rich renderings of the audit reports (``jaxport audit run|static|matrix|upgrade|expiring``),
in the conventions of ``render.py`` (80 columns, key columns never cut, short digests)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text

from jaxport._cli.render import add_row, key_column, short_digest

__all__ = ["findings_table", "matrix_table", "upgrade_table", "windows_table"]

# -- audits ---------------------------------------------------------------------------------

_STATUS_STYLE = {
    "ok": "green",
    "incompatible": "yellow",
    "compile-error": "red",
    "mismatch": "red",
    "error": "red",
}


def _status(status: str, *, short: bool = False) -> Text:
    text = _SHORT_STATUS.get(status, status) if short else status
    return Text(text, style=_STATUS_STYLE.get(status, ""))


def _provenance(report: Any, verb: str) -> Text:
    """The line above a report's table: which jax and jaxlib made it, and when (UTC)."""
    from jaxport._cli.output import iso_time

    return Text(
        f"{verb} jax {report.jax_version}, jaxlib {report.jaxlib_version}, "
        f"{iso_time(report.generated_at)}"
    )


#: The width of a short digest (``sha256:`` + 12 hex): the variant column's least width, so
#: the digest is never cut (it goes on a line of its own in a narrow column).
_SHORT_WIDTH = 19


def _variant_column() -> Column:
    return Column("variant", overflow="fold", min_width=_SHORT_WIDTH)


def _variant(row: Any) -> Text:
    """``name:version sha256:0123456789ab``: one variant (a version's variants differ in
    digest), wrapped before the digest where the column is narrow."""
    return Text(f"{row.name}:{row.version} {row.short_digest}")


def findings_table(report: Any) -> Group:
    """``audit``: which jax audited and when, then one row per variant (name, version, short
    digest) and platform (seconds and every check: ``--json``)."""
    table = Table(
        _variant_column(), key_column("platform"), key_column("status"),
        Column("reason", overflow="fold", min_width=16, ratio=1),
    )  # fmt: skip
    for f in report.findings:
        add_row(table, _variant(f), f.platform, _status(f.status), Text(f.reason))
    return Group(_provenance(report, "audited with"), table)


#: Shorter statuses for matrix and upgrade cells, so more releases fit in 80 columns.
_SHORT_STATUS = {"incompatible": "incompat", "compile-error": "compile-err"}
#: What an empty matrix or upgrade cell shows (``"not audited"`` in ``--json``).
_NO_FINDING = "-"
#: The table width the matrix keeps to: past it, one row per cell instead of a column per
#: release.
_WIDTH = 80


def _cell(status: str) -> Text:
    if status == _not_audited():
        return Text(_NO_FINDING)
    return _status(status, short=True)


def _not_audited() -> str:
    from jaxport.audit import NOT_AUDITED

    return NOT_AUDITED


def _release_widths(report: Any) -> list[int]:
    widths = {r: len(r) for r in report.releases}
    for c in report.cells:
        widths[c.jax_version] = max(widths[c.jax_version], len(_cell(c.status).plain))
    return [widths[r] for r in report.releases]


def _fits_as_columns(report: Any) -> bool:
    """Whether a column per release fits in ``_WIDTH``: the variant and platform columns, each
    release's, and the borders and padding of each (3 characters, plus 1)."""
    widths = [_SHORT_WIDTH, len("platform"), *_release_widths(report)]
    return sum(widths) + 3 * len(widths) + 1 <= _WIDTH


def matrix_table(report: Any) -> Group:
    """``audit matrix``: which jax made it and when, then (variant, platform) x jax releases,
    the newest finding in each cell ("-": none); where a column per release does not fit in
    80 columns, one row per cell that has a finding instead."""
    releases = list(report.releases)
    cells = list(report.cells)
    rows = [cells[i : i + len(releases)] for i in range(0, len(cells), len(releases) or 1)]
    title = "variants x jax releases"
    if not _fits_as_columns(report):
        table = Table(
            _variant_column(),
            key_column("platform"),
            key_column("jax"),
            key_column("status"),
            title=title,
        )
        for c in cells:
            if c.finding is not None:
                add_row(table, _variant(c), c.platform, c.jax_version, _status(c.status))
        return Group(_provenance(report, "report by"), table)
    table = Table(
        _variant_column(), key_column("platform"), *(key_column(r) for r in releases), title=title
    )
    for row in rows:
        add_row(table, _variant(row[0]), row[0].platform, *(_cell(c.status) for c in row))
    return Group(_provenance(report, "report by"), table)


def upgrade_table(report: Any) -> Group:
    """``audit upgrade``: which jax made it and when, then each variant and platform's
    status now and after ("-": not audited); a row that breaks says ``BREAKS`` before its
    reason."""
    table = Table(
        _variant_column(), key_column("platform"), key_column("now"), key_column("after"),
        Column("reason", overflow="fold", min_width=15, ratio=1),
        title=f"upgrade {report.current} -> {report.target}",
    )  # fmt: skip
    for r in report.rows:
        reason = (
            Text("BREAKS", style="red") + Text(": " if r.reason else "") if r.breaks else Text()
        )
        add_row(
            table, _variant(r), r.platform, _cell(r.now), _cell(r.after), reason + Text(r.reason)
        )
    return Group(_provenance(report, "report by"), table)


def windows_table(rows: list[Any]) -> Table:
    """``audit expiring``: one row per variant, soonest end first (unknown last).

    "jax" is the release that wrote it, "jax reads" what the running jax's own ``deserialize``
    does with it (its window rule), "last ok" the newest jax a stored audit found it ok under.
    Fits 80 columns (the platforms are in ``--json``)."""
    table = Table(
        Column("variant"),
        Column("jax", no_wrap=True),
        Column("window ends"),
        Column("jax reads"),
        Column("last ok", no_wrap=True),
        title="variants whose jax window ends before the date",
    )
    for r in sorted(rows, key=lambda r: (r.window.window_ends or "9999", r.name, r.version)):
        w = r.window
        ends = w.window_ends or "unknown"
        if w.within_window is False:
            ends += " (past)"
        table.add_row(
            f"{r.name}:{r.version} {short_digest(r.digest)}",
            w.jax_version,
            ends,
            w.jax_deserialize,
            w.last_known_release or "-",
        )
    return table
