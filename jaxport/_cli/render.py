"""rich renderings of what the CLI prints (tables and panels); JSON is printed apart.

Every table reads in 80 columns: key columns (names, versions, platforms, digests) never
wrap or get cut, long values fold, and secondary fields are left to ``--json``; the CLI prints
each rendering ``Trimmed``, so no line ends in a space. Digests show in their short form
(``sha256:`` + 12 hex digits), which every command takes as a reference; times are local, to
the minute.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

from jaxport._cli.window import window_text

__all__ = [
    "Trimmed",
    "alias_tables",
    "changes_table",
    "findings_table",
    "gc_summary",
    "info_tables",
    "local_time",
    "matrix_table",
    "model_tables",
    "outputs_table",
    "ref_panel",
    "refs_table",
    "short_digest",
    "upgrade_table",
    "variants_table",
    "verify_summary",
]


#: What ``ls`` and ``search`` add to a model's name or version (the kind is in ``--json``).
_MODEL_MARK = " (model)"


class Trimmed:
    """``renderable`` with no line ending in whitespace.

    rich pads every cell of a table column, and a table's centred title, to the column's or
    table's width; a terminal does not show the spaces, but diffs, ``grep`` and copies do.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in console.render_lines(self.renderable, options, pad=False):
            yield from _rstripped(line)
            yield Segment.line()


def _rstripped(line: list[Segment]) -> list[Segment]:
    """``line`` without its trailing whitespace (styles kept)."""
    line = list(line)
    while line and not line[-1].control and not line[-1].text.rstrip():
        line.pop()
    if line and not line[-1].control:
        last = line[-1]
        line[-1] = Segment(last.text.rstrip(), last.style)
    return line


def short_digest(digest: str) -> str:
    """A hex digest in the short form of ``VariantInfo.short_digest`` (``sha256:`` + 12 hex)."""
    from jaxport.registry import DIGEST_PREFIX, SHORT_DIGEST_HEX

    return f"{DIGEST_PREFIX}{digest[:SHORT_DIGEST_HEX]}"


def local_time(seconds: float, *, to_the_second: bool = False) -> str:
    """Unix seconds -> local time to the minute, e.g. ``2026-11-22 14:03`` (or to the second,
    ``2026-11-22 14:03:07``: the event log)."""
    form = "%Y-%m-%d %H:%M:%S" if to_the_second else "%Y-%m-%d %H:%M"
    return datetime.datetime.fromtimestamp(seconds).strftime(form)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _key(header: str) -> Column:
    """A column that is never cut or wrapped (names, versions, digests, sizes, times)."""
    return Column(header, no_wrap=True, min_width=len(header))


def _text(header: str, ratio: int | None = None) -> Column:
    """A column of free text that folds to fit (signatures, reasons, custom calls)."""
    return Column(header, overflow="fold", min_width=len(header), ratio=ratio)


def _row(table: Table, *cells: str | Text) -> None:
    # Cells hold user data (paths like "[0]['w']", shapes like "[b, 8]"): no rich markup.
    table.add_row(*(c if isinstance(c, Text) else escape(c) for c in cells))


def _join(items: Iterable[str]) -> str:
    return ", ".join(items) or "-"


# -- registry -------------------------------------------------------------------------------


def _marked(label: str, kind: str) -> str:
    """``label`` with ``_MODEL_MARK`` if ``kind`` is a model's."""
    return label + _MODEL_MARK if kind == "model" else label


def refs_table(refs: list[Any]) -> Table:
    """``ls``: one row per version, a model's name marked ``(model)``; a version's variants
    are separated by `` / ``."""
    table = Table(
        _text("name"), _key("version"), _text("platforms"), _key("devices"), _key("size"),
        _key("created"),
    )  # fmt: skip
    for r in refs:
        _row(
            table,
            _marked(r.name, r.kind),
            str(r.version),
            " / ".join(", ".join(v.platforms) for v in r.variants),
            " / ".join(str(v.nr_devices) for v in r.variants),
            _size(sum(v.size_bytes for v in r.variants)),
            local_time(r.created_at),
        )
    return table


def variants_table(variants: list[Any]) -> Table:
    """``search``: one row per variant, a model's version marked ``(model)`` (calling
    convention, VJP order: ``--json``)."""
    table = Table(
        _text("version"), _text("platforms"), _key("devices"), _key("jax"), _key("digest"),
        _key("size"),
    )  # fmt: skip
    for v in variants:
        _row(
            table,
            _marked(f"{v.name}:{v.version}", v.kind),
            ", ".join(v.platforms),
            str(v.nr_devices),
            v.jax_version,
            v.short_digest,
            _size(v.size_bytes),
        )
    return table


def ref_panel(data: dict[str, Any]) -> Group:
    """``show``: the version's aliases, time and metadata, its variants, then each in detail."""
    ref, aliases = data["ref"], data["aliases"]
    head = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    title = f"{ref.name}:{ref.version}" + "".join(f"  @{a}" for a in sorted(aliases))
    for key, value in (
        ("version", title),
        ("created", local_time(ref.created_at)),
        ("metadata", _join(f"{k}={v}" for k, v in sorted(ref.metadata.items()))),
    ):
        _row(head, key, value)
    table = Table(
        _key("digest"), _text("platforms"), _key("devices"), _key("jax"), _key("vjp"),
        _key("size"), title="variants",
    )  # fmt: skip
    for v in ref.variants:
        _row(
            table, v.short_digest, ", ".join(v.platforms), str(v.nr_devices), v.jax_version,
            "-" if v.kind == "model" else str(v.vjp_order), _size(v.size_bytes),
        )  # fmt: skip
    details = [_variant_detail(v) for v in ref.variants]
    for digest, why in (data.get("loads_here") or {}).items():
        details.append(Text(f"{digest}: {why}"))
    if data.get("windows"):
        details.append(_windows_grid(data["windows"]))
    if data.get("signatures"):
        from jaxport._cli.sign import signatures_table

        details.append(signatures_table(data["signatures"]))
    return Group(head, table, *details)


def _windows_grid(windows: list[Any]) -> Table:
    """``show``: each variant's place in jax's 6-month window."""
    grid = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    grid.title = "jax window"
    for w in windows:
        _row(grid, short_digest(w.digest), window_text(w.window))
    return grid


def _variant_detail(v: Any) -> RenderableType:
    """A variant's facts; a model's methods and parameters (when ``Registry.get`` read them)."""
    grid = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    flags = [f"calling convention {v.calling_convention_version}", f"jaxlib {v.jaxlib_version}"]
    flags += ["sharded"] * v.sharded + ["shape-polymorphic"] * v.shape_polymorphic
    model = v.kind == "model"
    what = (
        [(v.short_digest, f"model: {_join(m.name for m in v.methods)}")]
        if model
        else [
            (v.short_digest, f"function {v.fun_name}"),
            ("  in", v.in_signature),
            ("  out", v.out_signature),
        ]
    )
    for key, value in (
        *what,
        ("", ", ".join(flags)),
        ("  custom calls", _join(v.custom_call_targets)),
        ("  metadata", _join(f"{k}={val}" for k, val in sorted(v.metadata.items()))),
    ):
        _row(grid, key, value)
    if not model:
        return grid
    return Group(grid, _methods_table(v.methods), _parameters_table(v.tensors))


def alias_tables(data: dict[str, Any]) -> Group:
    """``alias NAME``: where each alias points now, then every move, newest last."""
    now = Table(_text("alias"), _key("version"), title=f"aliases of {data['name']}")
    for alias, version in sorted(data["aliases"].items()):
        _row(now, alias, str(version))
    history = Table(_text("alias"), _key("from"), _key("to"), _key("moved"), title="history")
    for m in data["history"]:
        _row(
            history,
            m.alias,
            "-" if m.from_version is None else str(m.from_version),
            "removed" if m.to_version is None else str(m.to_version),
            local_time(m.moved_at),
        )
    return Group(now, history)


def gc_summary(report: Any) -> Text:
    """``gc``: what was (or would be) removed, and what was kept back and why."""
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {len(report.digests)} unreferenced blob(s), {report.bytes:,} bytes"]
    if report.kept_young:
        lines.append(f"kept {len(report.kept_young)} younger than --min-age")
    if report.kept_pending:
        lines.append(f"kept {len(report.kept_pending)} held by a push in flight")
    if report.temp_files:
        lines.append(f"{verb} {len(report.temp_files)} stale temporary file(s)")
    if report.kept_temp:
        lines.append(f"kept {len(report.kept_temp)} temporary file(s) younger than --temp-age")
    if report.foreign:
        lines.append(f"left {len(report.foreign)} file(s) that are not jaxport's: ")
        lines[-1] += ", ".join(report.foreign)
    return Text("\n".join(lines))


def verify_summary(report: Any) -> Group:
    """``verify``: the counts, then each missing, corrupt or invalid blob and the versions
    needing it (and, for an invalid one, why)."""
    invalid = f", {len(report.invalid)} invalid" if report.deep else ""
    if getattr(report, "newer", ()):
        invalid += f", {len(report.newer)} valid but newer than this jax"
    counts = Text(
        f"checked {report.checked}: {len(report.missing)} missing, {len(report.corrupt)} "
        f"corrupt{invalid}, {len(report.unreferenced)} unreferenced"
    )
    if not report.problems:
        return Group(counts)
    table = Table(_key("digest"), _key("state"), _text("used by"), title="problems")
    for p in report.problems:
        used = _join(p.used_by) + (f": {p.reason}" if p.reason else "")
        _row(table, short_digest(p.digest), p.state, used)
    return Group(counts, table)


# -- archives -------------------------------------------------------------------------------


def info_tables(info: Any) -> Group:
    """``inspect``: the header's facts, the signature, the modules and the sections (a model
    archive: ``model_tables``)."""
    if info.kind == "model":
        return model_tables(info)
    head = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    for key, value in (
        ("function", info.fun_name),
        ("platforms", ", ".join(info.platforms)),
        ("devices", str(info.nr_devices)),
        (
            "format / calling convention",
            f"{info.format_version} / {info.calling_convention_version}",
        ),
        (
            "written by",
            f"jaxport {info.jaxport_version}, jax {info.jax_version}, jaxlib {info.jaxlib_version}",
        ),
        ("jax window", window_text(info.window) if info.window else "-"),
        *_this_jax(info),
        ("vjp order", str(info.vjp_order)),
        ("constraints", _join(info.symbolic_constraints)),
        ("custom calls", _join(info.custom_call_targets)),
        ("effects", _join(info.ordered_effects + info.unordered_effects)),
        ("metadata", _join(f"{k}={v}" for k, v in info.metadata.items())),
    ):
        _row(head, key, value)
    return Group(head, _signature_table(info), _modules_table(info), _sections_table(info))


def _this_jax(info: Any) -> list[tuple[str, str]]:
    """A "this jax" row where the header says the installed jax cannot (or may not) load the
    archive (``jaxport.export.unloadable_here``); none otherwise."""
    from jaxport.export import unloadable_here

    why = unloadable_here(info)
    return [("this jax", why)] if why else []


def _signature_table(info: Any) -> Table:
    sig = Table(
        _key(""), _text("path"), _text("shape"), _key("dtype"), _text("sharding"),
        title="signature",
    )  # fmt: skip
    for side, avals in (("in", info.in_avals), ("out", info.out_avals)):
        for a in avals:
            shape = f"({', '.join(map(str, a.shape))})"
            _row(sig, side, a.path or ".", shape, a.dtype, a.sharding or "")
    return sig


def _modules_table(info: Any) -> Table:
    modules = Table(
        _key("module"), _key("bytes"), _key("StableHLO"), _text("custom calls"), title="modules"
    )
    for m in info.modules:
        kind = "primal" if m.vjp_order == 0 else f"vjp {m.vjp_order}"
        _row(
            modules,
            f"{m.method} {kind}" if m.method else kind,
            f"{m.length:,}",
            m.stablehlo_version,
            ", ".join(m.custom_call_targets),
        )
    return modules


def _sections_table(info: Any) -> Table:
    sections = Table(
        _key("section"), _key("offset"), _key("stored"), _key("uncompressed"),
        _key("compression"), _key("sha256"), title="sections",
    )  # fmt: skip
    for i, s in enumerate(info.sections):
        _row(
            sections, str(i), str(s.offset), _size(s.length), _size(s.uncompressed_length),
            s.compression, s.sha256[:12],
        )  # fmt: skip
    return sections


def _stored(info: Any) -> str:
    """How a model's tensors are stored: raw, or how many are zstd and their stored size."""
    zstd = [t for t in info.tensors if info.sections[t.section].compression == "zstd"]
    if not zstd:
        return "all raw"
    stored = sum(info.sections[t.section].length for t in zstd)
    raw = sum(t.nbytes for t in zstd)
    rest = "" if len(zstd) == len(info.tensors) else "; the rest raw"
    return f"{len(zstd)} tensor(s) zstd, {_size(raw)} in {_size(stored)}{rest}"


def model_tables(info: Any) -> Group:
    """``inspect`` of a model archive: its facts, methods, parameters and modules (section
    offsets and digests: ``--json``)."""
    total = sum(t.nbytes for t in info.tensors)
    modules = info.sections[0] if info.sections else None
    head = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    for key, value in (
        ("methods", _join(m.name for m in info.methods)),
        ("parameters", f"{len(info.tensors)} tensor(s), {total:,} bytes" + _approx(total)),
        ("stored", _stored(info)),
        (
            "modules",
            f"{_size(modules.length)} {modules.compression} ({_size(modules.uncompressed_length)})"
            if modules
            else "-",
        ),
        ("format version", str(info.format_version)),
        (
            "written by",
            f"jaxport {info.jaxport_version}, jax {info.jax_version}, jaxlib {info.jaxlib_version}",
        ),
        ("jax window", window_text(info.window) if info.window else "-"),
        *_this_jax(info),
        ("custom calls", _join(info.custom_call_targets)),
        ("metadata", _join(f"{k}={v}" for k, v in info.metadata.items())),
    ):
        _row(head, key, value)
    return Group(
        head,
        _methods_table(info.methods),
        _parameters_table(info.tensors),
        _modules_table(info),
    )


def _methods_table(methods: Iterable[Any]) -> Table:
    """A model's methods (``MethodInfo``): signature, platforms, devices, VJP order."""
    from jaxport._cli.runner import aval_text, signature

    table = Table(
        _key("method"), _text("signature", ratio=1), _text("platforms"), _key("devices"),
        _key("vjp"), title="methods",
    )  # fmt: skip
    for m in methods:
        sig = signature(
            [(a.path, aval_text(a.shape, a.dtype)) for a in m.in_avals],
            [(a.path, aval_text(a.shape, a.dtype)) for a in m.out_avals],
        )
        if m.symbolic_constraints:
            sig += f" where {', '.join(m.symbolic_constraints)}"
        _row(table, m.name, sig, ", ".join(m.platforms), str(m.nr_devices), str(m.vjp_order))
    return table


def _approx(nbytes: int) -> str:
    return f" ({_size(nbytes)})" if nbytes >= 1024 else ""


def _parameters_table(tensors: Iterable[Any]) -> Table:
    """A model's parameters (``TensorInfo``): path, shape, dtype, bytes, and the total."""
    total = 0
    table = Table(
        _text("path", ratio=1), _text("shape"), _key("dtype"), _key("bytes"), title="parameters"
    )
    for t in tensors:
        _row(table, t.path, f"({', '.join(map(str, t.shape))})", t.dtype, f"{t.nbytes:,}")
        total += t.nbytes
    table.add_section()
    _row(table, "total", "", "", f"{total:,}")
    return table


def outputs_table(ran: dict[str, Any]) -> Group:
    """``run``: the file written, then each output's shape, dtype, min, max, first values."""
    outputs = ran["outputs"]
    line = Text(
        f"wrote {ran['path']} ({len(outputs)} array(s), {ran['bytes']:,} bytes): "
        f"{'function' if ran.get('kind') == 'function' else 'method'} {ran['method']}"
    )
    table = Table(
        _text("output"), _text("shape"), _key("dtype"), _key("min"), _key("max"),
        _text("first values", ratio=1),
    )  # fmt: skip
    for o in outputs:
        first = ", ".join(map(_number, o.first))
        more = ", ..." if len(o.first) < _count(o.shape) else ""
        _row(
            table, o.name, f"({', '.join(map(str, o.shape))})", o.dtype, _number(o.min),
            _number(o.max), first + more,
        )  # fmt: skip
    return Group(line, table)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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
        _variant_column(), _key("platform"), _key("status"),
        Column("reason", overflow="fold", min_width=16, ratio=1),
    )  # fmt: skip
    for f in report.findings:
        _row(table, _variant(f), f.platform, _status(f.status), Text(f.reason))
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
    """``audit --matrix``: which jax made it and when, then (variant, platform) x jax releases,
    the newest finding in each cell ("-": none); where a column per release does not fit in
    80 columns, one row per cell that has a finding instead."""
    releases = list(report.releases)
    cells = list(report.cells)
    rows = [cells[i : i + len(releases)] for i in range(0, len(cells), len(releases) or 1)]
    title = "variants x jax releases"
    if not _fits_as_columns(report):
        table = Table(_variant_column(), _key("platform"), _key("jax"), _key("status"), title=title)
        for c in cells:
            if c.finding is not None:
                _row(table, _variant(c), c.platform, c.jax_version, _status(c.status))
        return Group(_provenance(report, "report by"), table)
    table = Table(_variant_column(), _key("platform"), *(_key(r) for r in releases), title=title)
    for row in rows:
        _row(table, _variant(row[0]), row[0].platform, *(_cell(c.status) for c in row))
    return Group(_provenance(report, "report by"), table)


def upgrade_table(report: Any) -> Group:
    """``audit --upgrade-to``: which jax made it and when, then each variant and platform's
    status now and after ("-": not audited); a row that breaks says ``BREAKS`` before its
    reason."""
    table = Table(
        _variant_column(), _key("platform"), _key("now"), _key("after"),
        Column("reason", overflow="fold", min_width=15, ratio=1),
        title=f"upgrade {report.current} -> {report.target}",
    )  # fmt: skip
    for r in report.rows:
        reason = (
            Text("BREAKS", style="red") + Text(": " if r.reason else "") if r.breaks else Text()
        )
        _row(table, _variant(r), r.platform, _cell(r.now), _cell(r.after), reason + Text(r.reason))
    return Group(_provenance(report, "report by"), table)


def changes_table(changes: list[Any]) -> Table:
    """``diff``: each change, breaking or compatible, with where and what it was before."""
    table = Table(
        _key("kind"), _text("change"), _text("where"), _text("before"), _text("after"),
        title="diff",
    )  # fmt: skip
    for c in changes:
        kind = Text("breaking", style="red") if c.breaking else Text("compatible", style="green")
        _row(table, kind, Text(c.what), Text(c.where), Text(str(c.before)), Text(str(c.after)))
    return table
