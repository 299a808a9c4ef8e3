"""Helpers shared by the tests: every export test goes through the format."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
from jax import export
from jax._src import core

import jaxport
from jaxport.export import _archive, _compat

_FIELDS = (
    "fun_name",
    "in_tree",
    "out_tree",
    "nr_devices",
    "platforms",
    "ordered_effects",
    "unordered_effects",
    "disabled_safety_checks",
    "mlir_module_serialized",
    "calling_convention_version",
    "module_kept_var_idx",
    "uses_global_constants",
    "in_shardings_hlo",
    "out_shardings_hlo",
)


def roundtrip(exp: Any, vjp_order: int = 0, **kwargs: Any) -> Any:
    """``loads(dumps(exp))``, checking that the result equals ``exp`` field by field.

    VJP modules are compared as ``dumps`` stores them (``_archive.stored_vjp``: a live
    Exported's re-exported VJP without the caller's source locations), then again after a
    second round trip.
    """
    back = jaxport.loads(jaxport.dumps(exp, vjp_order=vjp_order, **kwargs))
    assert_exported_equal(exp, back, vjp_order)
    again = jaxport.loads(jaxport.dumps(back, vjp_order=vjp_order, **kwargs))
    assert_exported_equal(back, again, vjp_order)
    return back


def _avals_key(avals: Any) -> list[tuple[str, Any, bool, Any, str]]:
    return [
        (
            str(a.shape),
            a.dtype,
            a.weak_type,
            getattr(a, "sharding", None),
            str(getattr(a, "memory_space", None)),
        )
        for a in avals
    ]


def assert_exported_equal(a: Any, b: Any, vjp_order: int = 0) -> None:
    """``a`` and ``b`` agree on every field (and so do their VJPs as stored, to ``vjp_order``)."""
    for name in _FIELDS:
        va, vb = getattr(a, name), getattr(b, name)
        if name == "disabled_safety_checks":
            va, vb = tuple(va), tuple(vb)
        if name.endswith("shardings_hlo"):
            va, vb = (
                [None if s is None else str(s) for s in va],
                [None if s is None else str(s) for s in vb],
            )
        assert va == vb, f"{name}: {va!r} != {vb!r}"
    assert _avals_key(a.in_avals) == _avals_key(b.in_avals)
    assert _avals_key(a.out_avals) == _avals_key(b.out_avals)
    assert _compat.exported_named_shardings(a) == _compat.exported_named_shardings(b)
    assert _scope_constraints(a) == _scope_constraints(b)
    assert b.has_vjp() == (vjp_order > 0)
    if vjp_order > 0:
        assert_exported_equal(_archive.stored_vjp(a), _archive.stored_vjp(b), vjp_order - 1)


def _scope_constraints(exp: Any) -> tuple[str, ...]:
    from jaxport.export._avals import symbolic_constraints

    return symbolic_constraints(list(exp.in_avals) + list(exp.out_avals))[1]


class FaultyBlobStore:
    """A local blob store that injects faults: ``fail_puts`` puts raise OSError, and
    ``before_put`` (if set) runs before each put or existence check, e.g. a gc racing a push."""

    def __init__(self, root: Any):
        from jaxport.registry import LocalBlobStore

        self._inner = LocalBlobStore(root)
        self.url = self._inner.url
        self.root = self._inner.root
        self.fail_puts = 0
        self.before_put: Any = None

    def put(self, digest: str, data: bytes, *, replace: bool = False) -> None:
        if self.before_put is not None:
            self.before_put(digest)
        if self.fail_puts:
            self.fail_puts -= 1
            raise OSError(f"injected fault writing {digest}")
        self._inner.put(digest, data, replace=replace)

    def exists(self, digest: str) -> bool:
        if self.before_put is not None:
            self.before_put(digest)
        return bool(self._inner.exists(digest))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@functools.cache
def crashes_this_jaxlib(path: Path) -> bool:
    """Whether the crasher archive at ``path`` still crashes this jaxlib's module reader (read
    in the module sandbox: a crash is an ``UnsafeModuleError``). jaxlib 0.12 reads
    ``mlir_portable_artifact_segfault`` and refuses it ("Failed to deserialize StableHLO")."""
    try:
        jaxport.loads(path.read_bytes())
    except jaxport.UnsafeModuleError:
        return True
    except jaxport.JaxportError:
        return False
    return False


def skip_unless_it_crashes(path: Path) -> None:
    """Skips a test of the crash path when this jaxlib no longer crashes on ``path``: the path
    is tested under the jax releases where it does (scripts/test_jax_versions.sh)."""
    import jaxlib
    import pytest

    if not crashes_this_jaxlib(path):
        pytest.skip(
            f"jaxlib {jaxlib.__version__} no longer crashes on {path.name} (it refuses it as an "
            "error): the crash path is tested under the jax releases where it crashes"
        )


def from_compat_data(data: dict[str, Any], polymorphic_shapes: Any = None) -> Any:
    """The Exported of a ``CompatTestData`` dict, as jax's ``run_serialized`` builds it."""
    specs = export.symbolic_args_specs(data["inputs"], polymorphic_shapes)
    in_avals, in_tree = jax.tree.flatten(
        (tuple(jax.core.ShapedArray(a.shape, a.dtype) for a in specs), {})
    )
    out_avals, out_tree = jax.tree.flatten(
        tuple(jax.core.ShapedArray(a.shape, a.dtype) for a in data["expected_outputs"])
    )
    return _compat.make_exported(
        fun_name="run_serialized",
        in_tree=in_tree,
        in_avals=tuple(in_avals),
        out_tree=out_tree,
        out_avals=tuple(out_avals),
        _has_named_shardings=True,
        _in_named_shardings=(None,) * len(in_avals),
        _out_named_shardings=(None,) * len(out_avals),
        in_shardings_hlo=(None,) * len(in_avals),
        out_shardings_hlo=(None,) * len(out_avals),
        platforms=(data["platform"],),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=data["mlir_module_serialized"],
        calling_convention_version=data["xla_call_module_version"],
        nr_devices=data.get("nr_devices", 1),
        module_kept_var_idx=tuple(range(len(in_avals))),
        uses_global_constants=any(not core.is_constant_shape(a.shape) for a in in_avals),
        _get_vjp=None,
    )


def add_versions(
    registry: Any,
    name: str,
    count: int,
    *,
    platforms: tuple[str, ...] | None = None,
    variants: int = 1,
) -> None:
    """Adds ``count`` versions to ``name`` (which has one), each with ``variants`` copies of
    the first variant of its newest version that has variants (exported for ``platforms``
    instead, if given), written straight in SQL: what ``count`` pushes of distinct archives
    would add."""
    import uuid

    import sqlalchemy as sa

    from jaxport.registry._models import NameRow, VariantPlatformRow, VariantRow, VersionRow

    with registry._backend.engine.begin() as conn:
        model_id, last = conn.execute(
            sa.select(NameRow.id, NameRow.last_version).where(NameRow.name == name)
        ).one()
        first_of_newest = (
            sa.select(VariantRow.__table__)
            .join(VersionRow, VersionRow.id == VariantRow.version_id)
            .where(VersionRow.model_id == model_id)
            .order_by(VersionRow.version.desc(), VariantRow.id)
            .limit(1)
        )
        row = dict(conn.execute(first_of_newest).mappings().one())
        row.pop("id")
        if platforms is not None:
            row["platforms"] = ",".join(platforms)
        for version in range(last + 1, last + count + 1):
            version_id = conn.execute(
                sa.insert(VersionRow).returning(VersionRow.id),
                {"model_id": model_id, "version": version, "created_at": float(version),
                 "metadata_json": "{}", "content_key": uuid.uuid4().hex},
            ).scalar_one()  # fmt: skip
            ids = (
                conn.execute(
                    sa.insert(VariantRow).returning(VariantRow.id, sort_by_parameter_order=True),
                    [{**row, "version_id": version_id} for _ in range(variants)],
                )
                .scalars()
                .all()
            )
            conn.execute(
                sa.insert(VariantPlatformRow),
                [
                    {"variant_id": i, "platform": p}
                    for i in ids
                    for p in row["platforms"].split(",")
                ],
            )
        conn.execute(
            sa.update(NameRow).where(NameRow.id == model_id).values(last_version=last + count)
        )
