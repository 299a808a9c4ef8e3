"""rich renderings of what the CLI prints (tables and panels); JSON is printed apart."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from jaxport.registry._audit import release_key

__all__ = [
    "changes_table",
    "findings_table",
    "info_tables",
    "matrix_table",
    "ref_panel",
    "refs_table",
    "upgrade_table",
    "variants_table",
]


def _row(table: Table, *cells: str) -> None:
    # Cells hold user data (paths like "[0]['w']", shapes like "[b, 8]"): no rich markup.
    table.add_row(*(escape(c) for c in cells))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def refs_table(refs: list[Any]) -> Table:
    table = Table("name", "version", "variants", "platforms", "devices", "size")
    for r in refs:
        _row(
            table,
            r.name,
            str(r.version),
            str(len(r.variants)),
            " / ".join(",".join(v.platforms) for v in r.variants),
            " / ".join(str(v.nr_devices) for v in r.variants),
            _size(sum(v.size_bytes for v in r.variants)),
        )
    return table


def variants_table(variants: list[Any]) -> Table:
    table = Table(
        "id", "name", "version", "platforms", "devices", "jax", "cc", "vjp", "digest", "size"
    )
    for v in variants:
        _row(
            table,
            str(v.variant_id),
            v.name,
            str(v.version),
            ",".join(v.platforms),
            str(v.nr_devices),
            v.jax_version,
            str(v.calling_convention_version),
            str(v.vjp_order),
            v.digest[:12],
            _size(v.size_bytes),
        )
    return table


def ref_panel(data: dict[str, Any]) -> Group:
    ref, aliases = data["ref"], data["aliases"]
    title = f"{ref.name}:{ref.version}" + (f"  (@{', @'.join(sorted(aliases))})" if aliases else "")
    table = Table(
        "platforms",
        "devices",
        "sharded",
        "poly",
        "jax",
        "cc",
        "vjp",
        "custom calls",
        "digest",
        "size",
        title=title,
    )
    for v in ref.variants:
        _row(
            table,
            ",".join(v.platforms),
            str(v.nr_devices),
            "yes" if v.sharded else "",
            "yes" if v.shape_polymorphic else "",
            v.jax_version,
            str(v.calling_convention_version),
            str(v.vjp_order),
            ",".join(v.custom_call_targets),
            v.digest[:12],
            _size(v.size_bytes),
        )
    return Group(
        table, *(Text(f"  in:  {v.in_signature}\n  out: {v.out_signature}") for v in ref.variants)
    )


def info_tables(info: Any) -> Group:
    head = Table.grid(padding=(0, 2))
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
        ("vjp order", str(info.vjp_order)),
        ("constraints", ", ".join(info.symbolic_constraints) or "-"),
        ("custom calls", ", ".join(info.custom_call_targets) or "-"),
        ("effects", ", ".join(info.ordered_effects + info.unordered_effects) or "-"),
        ("metadata", ", ".join(f"{k}={v}" for k, v in info.metadata.items()) or "-"),
    ):
        _row(head, key, value)
    sig = Table("", "path", "shape", "dtype", "sharding", title="signature")
    for side, avals in (("in", info.in_avals), ("out", info.out_avals)):
        for a in avals:
            _row(
                sig,
                side,
                a.path or ".",
                f"({', '.join(map(str, a.shape))})",
                a.dtype,
                a.sharding or "",
            )
    sections = Table(
        "section", "offset", "stored", "uncompressed", "compression", "sha256", title="sections"
    )
    for i, s in enumerate(info.sections):
        _row(
            sections,
            str(i),
            str(s.offset),
            _size(s.length),
            _size(s.uncompressed_length),
            s.compression,
            s.sha256[:16],
        )
    modules = Table("module", "bytes", "StableHLO", "custom calls", title="modules")
    for m in info.modules:
        _row(
            modules,
            "primal" if m.vjp_order == 0 else f"vjp {m.vjp_order}",
            f"{m.length:,}",
            m.stablehlo_version,
            ", ".join(m.custom_call_targets),
        )
    return Group(head, sig, modules, sections)


_STATUS_STYLE = {
    "ok": "green",
    "incompatible": "yellow",
    "compile-error": "red",
    "mismatch": "red",
    "error": "red",
}


def _status(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, ""))


def findings_table(findings: list[Any]) -> Table:
    table = Table("name", "version", "digest", "jax", "platform", "status", "reason", "s")
    for f in findings:
        table.add_row(
            escape(f.name), str(f.version), f.digest[:12], f.jax_version, f.platform,
            _status(f.status), Text(f.reason), f"{f.seconds:.2f}",
        )  # fmt: skip
    return table


def matrix_table(findings: list[Any]) -> Table:
    releases = sorted({f.jax_version for f in findings}, key=release_key)
    latest: dict[tuple[str, str], Any] = {}
    for f in findings:  # newest first
        latest.setdefault((f.digest, f.jax_version), f)
    table = Table("name:version", "digest", *releases, title="variants x jax releases")
    rows = sorted({(f.name, f.version, f.digest) for f in findings})
    for name, version, digest in rows:
        cells = [latest.get((digest, r)) for r in releases]
        table.add_row(
            escape(f"{name}:{version}"), digest[:12],
            *(_status(c.status) if c else Text("-") for c in cells),
        )  # fmt: skip
    return table


def upgrade_table(rows: list[Any]) -> Table:
    table = Table("name:version", "digest", "now", "after", "breaks", "reason", title="upgrade")
    for r in rows:
        table.add_row(
            escape(f"{r.name}:{r.version}"), r.digest[:12], _status(r.now),
            _status(r.after), "BREAKS" if r.breaks else "", Text(r.reason),
        )  # fmt: skip
    return table


def changes_table(changes: list[Any]) -> Table:
    table = Table("", "change", "where", "before", "after", title="diff")
    for c in changes:
        table.add_row(
            Text("breaking", style="red") if c.breaking else Text("compatible", style="green"),
            c.what, Text(c.where), Text(str(c.before)), Text(str(c.after)),
        )  # fmt: skip
    return table
