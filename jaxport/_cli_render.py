"""rich renderings of what the CLI prints (tables and panels); JSON is printed apart."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

__all__ = ["info_tables", "ref_panel", "refs_table", "variants_table"]


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
