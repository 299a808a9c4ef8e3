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
    "add_row",
    "alias_tables",
    "changes_table",
    "gc_summary",
    "info_tables",
    "key_column",
    "local_time",
    "model_tables",
    "outputs_table",
    "ref_panel",
    "refs_table",
    "short_digest",
    "signatures_table",
    "text_column",
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
    from jaxport.registry._internal import DIGEST_PREFIX, SHORT_DIGEST_HEX

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


def key_column(header: str) -> Column:
    """A column that is never cut or wrapped (names, versions, digests, sizes, times)."""
    return Column(header, no_wrap=True, min_width=len(header))


def text_column(header: str, ratio: int | None = None) -> Column:
    """A column of free text that folds to fit (signatures, reasons, custom calls)."""
    return Column(header, overflow="fold", min_width=len(header), ratio=ratio)


def add_row(table: Table, *cells: str | Text) -> None:
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
        text_column("name"),
        key_column("version"),
        text_column("platforms"),
        key_column("devices"),
        key_column("size"),
        key_column("created"),
    )
    for r in refs:
        add_row(
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
        text_column("version"),
        text_column("platforms"),
        key_column("devices"),
        key_column("jax"),
        key_column("digest"),
        key_column("size"),
    )
    for v in variants:
        add_row(
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
        add_row(head, key, value)
    if data.get("lineage") is not None:
        from jaxport._cli.render_lineage import provenance_rows

        for key, value in provenance_rows(data["lineage"]):
            add_row(head, key, value)
    table = Table(
        key_column("digest"),
        text_column("platforms"),
        key_column("devices"),
        key_column("jax"),
        key_column("vjp"),
        key_column("size"),
        title="variants",
    )
    for v in ref.variants:
        add_row(
            table,
            v.short_digest,
            ", ".join(v.platforms),
            str(v.nr_devices),
            v.jax_version,
            "-" if v.kind == "model" else str(v.vjp_order),
            _size(v.size_bytes),
        )
    details = [_variant_detail(v) for v in ref.variants]
    for digest, why in (data.get("loads_here") or {}).items():
        details.append(Text(f"{digest}: {why}"))
    if data.get("windows"):
        details.append(_windows_grid(data["windows"]))
    if data.get("signatures"):
        details.append(signatures_table(data["signatures"]))
    if data.get("gates"):
        from jaxport._cli.render_gates import gates_text

        details.append(Text("gates (each protected alias, at the version it points at)"))
        details.append(Text(gates_text(data["gates"])))
    return Group(head, table, *details)


def signatures_table(signatures: list[Any]) -> Any:
    """``show``: the signatures stored for the version's variants (not verified)."""
    from rich.table import Table

    table = Table("variant", "signer", "kind", "signed", title="signatures (not verified here)")
    for s in signatures:
        table.add_row(f"sha256:{s.digest[:12]}", s.short_signer, s.kind, local_time(s.created_at))
    return table


def _windows_grid(windows: list[Any]) -> Table:
    """``show``: each variant's place in jax's 6-month window."""
    grid = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    grid.title = "jax window"
    for w in windows:
        add_row(grid, short_digest(w.digest), window_text(w.window))
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
        add_row(grid, key, value)
    if not model:
        return grid
    return Group(grid, _methods_table(v.methods), _parameters_table(v.tensors))


def alias_tables(data: dict[str, Any]) -> Group:
    """``alias NAME``: where each alias points now, then every move, newest last."""
    now = Table(text_column("alias"), key_column("version"), title=f"aliases of {data['name']}")
    for alias, version in sorted(data["aliases"].items()):
        add_row(now, alias, str(version))
    history = Table(
        text_column("alias"),
        key_column("from"),
        key_column("to"),
        key_column("moved"),
        title="history",
    )
    for m in data["history"]:
        add_row(
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
    if getattr(report, "purged", ()):
        lines.append(f"{verb} {len(report.purged)} version(s) past their restore period: ")
        lines[-1] += ", ".join(report.purged)
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
    table = Table(
        key_column("digest"), key_column("state"), text_column("used by"), title="problems"
    )
    for p in report.problems:
        used = _join(p.used_by) + (f": {p.reason}" if p.reason else "")
        add_row(table, short_digest(p.digest), p.state, used)
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
        add_row(head, key, value)
    return Group(head, _signature_table(info), _modules_table(info), _sections_table(info))


def _this_jax(info: Any) -> list[tuple[str, str]]:
    """A "this jax" row where the header says the installed jax cannot (or may not) load the
    archive (``jaxport.export._internal.unloadable_here``); none otherwise."""
    from jaxport.export._internal import unloadable_here

    why = unloadable_here(info)
    return [("this jax", why)] if why else []


def _signature_table(info: Any) -> Table:
    sig = Table(
        key_column(""),
        text_column("path"),
        text_column("shape"),
        key_column("dtype"),
        text_column("sharding"),
        title="signature",
    )
    for side, avals in (("in", info.in_avals), ("out", info.out_avals)):
        for a in avals:
            shape = f"({', '.join(map(str, a.shape))})"
            add_row(sig, side, a.path or ".", shape, a.dtype, a.sharding or "")
    return sig


def _modules_table(info: Any) -> Table:
    modules = Table(
        key_column("module"),
        key_column("bytes"),
        key_column("StableHLO"),
        text_column("custom calls"),
        title="modules",
    )
    for m in info.modules:
        kind = "primal" if m.vjp_order == 0 else f"vjp {m.vjp_order}"
        add_row(
            modules,
            f"{m.method} {kind}" if m.method else kind,
            f"{m.length:,}",
            m.stablehlo_version,
            ", ".join(m.custom_call_targets),
        )
    return modules


def _sections_table(info: Any) -> Table:
    sections = Table(
        key_column("section"),
        key_column("offset"),
        key_column("stored"),
        key_column("uncompressed"),
        key_column("compression"),
        key_column("sha256"),
        title="sections",
    )
    for i, s in enumerate(info.sections):
        add_row(
            sections,
            str(i),
            str(s.offset),
            _size(s.length),
            _size(s.uncompressed_length),
            s.compression,
            s.sha256[:12],
        )
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
        add_row(head, key, value)
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
        key_column("method"),
        text_column("signature", ratio=1),
        text_column("platforms"),
        key_column("devices"),
        key_column("vjp"),
        title="methods",
    )
    for m in methods:
        sig = signature(
            [(a.path, aval_text(a.shape, a.dtype)) for a in m.in_avals],
            [(a.path, aval_text(a.shape, a.dtype)) for a in m.out_avals],
        )
        if m.symbolic_constraints:
            sig += f" where {', '.join(m.symbolic_constraints)}"
        add_row(table, m.name, sig, ", ".join(m.platforms), str(m.nr_devices), str(m.vjp_order))
    return table


def _approx(nbytes: int) -> str:
    return f" ({_size(nbytes)})" if nbytes >= 1024 else ""


def _parameters_table(tensors: Iterable[Any]) -> Table:
    """A model's parameters (``TensorInfo``): path, shape, dtype, bytes, and the total."""
    total = 0
    table = Table(
        text_column("path", ratio=1),
        text_column("shape"),
        key_column("dtype"),
        key_column("bytes"),
        title="parameters",
    )
    for t in tensors:
        add_row(table, t.path, f"({', '.join(map(str, t.shape))})", t.dtype, f"{t.nbytes:,}")
        total += t.nbytes
    table.add_section()
    add_row(table, "total", "", "", f"{total:,}")
    return table


def outputs_table(ran: dict[str, Any]) -> Group:
    """``run``: the file written, then each output's shape, dtype, min, max, first values."""
    outputs = ran["outputs"]
    line = Text(
        f"wrote {ran['path']} ({len(outputs)} array(s), {ran['bytes']:,} bytes): "
        f"{'function' if ran.get('kind') == 'function' else 'method'} {ran['method']}"
    )
    table = Table(
        text_column("output"),
        text_column("shape"),
        key_column("dtype"),
        key_column("min"),
        key_column("max"),
        text_column("first values", ratio=1),
    )
    for o in outputs:
        first = ", ".join(map(_number, o.first))
        more = ", ..." if len(o.first) < _count(o.shape) else ""
        add_row(
            table,
            o.name,
            f"({', '.join(map(str, o.shape))})",
            o.dtype,
            _number(o.min),
            _number(o.max),
            first + more,
        )
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


def changes_table(changes: list[Any]) -> Table:
    """``diff``: each change, breaking or compatible, with where and what it was before."""
    table = Table(
        key_column("kind"),
        text_column("change"),
        text_column("where"),
        text_column("before"),
        text_column("after"),
        title="diff",
    )
    for c in changes:
        kind = Text("breaking", style="red") if c.breaking else Text("compatible", style="green")
        add_row(table, kind, Text(c.what), Text(c.where), Text(str(c.before)), Text(str(c.after)))
    return table
