"""The header readers that read a table's vtable once (``_fb.field_offsets``,
``_fb.read_uint8``, ``_fb.read_node_header``, used by the aval, sharding and pytree decoders
for speed, issue 27) agree with the generated FlatBuffers readers at every offset of real
headers: the same values where a table is read, a failure where they fail (a hostile header
may point anywhere)."""

from __future__ import annotations

import jax
import jax.export
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import _archive, _fb, _limits
from jaxport.schema import fb


def _mlp() -> jax.export.Exported:
    params = [
        {"w": np.ones((8, 4), np.float32), "b": np.zeros((4,), np.float32)},
        {"w": np.ones((4, 2), np.float32), "b": np.zeros((2,), np.float32)},
    ]

    def f(params, x):  # type: ignore[no-untyped-def]
        for layer in params:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return x

    x = jax.ShapeDtypeStruct((3, 8), jnp.float32)
    return jax.export.export(jax.jit(f))(params, x)


def _symbolic() -> jax.export.Exported:
    (b,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 4), jnp.float32, weak_type=True)
    return jax.export.export(jax.jit(lambda x: {"y": x * 2, "n": None}))(spec)


def _header_exported(exp: jax.export.Exported) -> fb.Exported:
    data = jaxport.dumps(exp, vjp_order=1)
    view = memoryview(data).cast("B")
    table = _archive.read_header(view, len(view), path=None).archive.Exported()
    assert table is not None
    return table


def _outcome(read, table: fb.Exported, position: int):  # type: ignore[no-untyped-def]
    with _limits.header_budget(len(table._tab.Bytes)):
        try:
            with _fb.translating_read_errors(where="test"):
                return ("value", read(table, position))
        except jaxport.CorruptArchiveError:
            return ("refused",)


def _generated_node(table: fb.Exported, position: int) -> tuple[int, int]:
    node = _fb.table_at(fb.PyTreeNode, table, position)
    return node.Kind(), node.NumChildren()


def _fast_aval(table: fb.Exported, position: int) -> tuple[int, ...]:
    aval = _fb.table_at(fb.AbstractValue, table, position)
    at = _fb.field_offsets(aval, 8)
    return (
        *(o != 0 for o in at),
        _fb.read_uint8(aval, at[2]),
        bool(_fb.read_uint8(aval, at[4])),  # as the decoder reads weak_type
        _fb.read_uint8(aval, at[5]),
    )


def _generated_aval(table: fb.Exported, position: int) -> tuple[int, ...]:
    a = _fb.table_at(fb.AbstractValue, table, position)
    present = [a._tab.Offset(4 + 2 * i) != 0 for i in range(8)]  # the vtable, slot by slot
    return (*present, a.Dtype(), a.WeakType(), a.MemorySpace())


@pytest.mark.parametrize("make", [_mlp, _symbolic], ids=["mlp", "symbolic"])
def test_vtable_readers_agree_with_generated_readers_at_every_offset(make) -> None:  # type: ignore[no-untyped-def]
    table = _header_exported(make())
    size = len(table._tab.Bytes)
    read_nodes = read_avals = 0
    for position in range(-4, size + 4):
        node = _outcome(lambda t, p: _fb.read_node_header(t, p), table, position)
        assert node == _outcome(_generated_node, table, position), position
        aval = _outcome(_fast_aval, table, position)
        assert aval == _outcome(_generated_aval, table, position), position
        read_nodes += node[0] == "value"
        read_avals += aval[0] == "value"
    assert read_nodes and read_avals  # real tables among the offsets, not only failures


@pytest.mark.parametrize("make", [_mlp, _symbolic], ids=["mlp", "symbolic"])
def test_decoded_exported_is_unchanged(make) -> None:  # type: ignore[no-untyped-def]
    exp = make()
    loaded = jaxport.loads(jaxport.dumps(exp, vjp_order=1))
    for ours, theirs in ((loaded, exp), (loaded.vjp(), exp.vjp())):
        # str: symbolic dimensions of two scopes never compare equal
        assert str(ours.in_avals) == str(theirs.in_avals)
        assert str(ours.out_avals) == str(theirs.out_avals)
        assert [a.weak_type for a in ours.in_avals] == [a.weak_type for a in theirs.in_avals]
        assert ours.in_tree == theirs.in_tree
        assert ours.out_tree == theirs.out_tree
        assert ours.in_shardings_hlo == theirs.in_shardings_hlo


@pytest.mark.parametrize("make", [_mlp, _symbolic], ids=["mlp", "symbolic"])
def test_table_positions_are_the_generated_readers_tables(make) -> None:  # type: ignore[no-untyped-def]
    table = _header_exported(make())
    with _limits.header_budget(len(table._tab.Bytes)):
        for field in ("Exported.InAvals", "Exported.OutAvals", "Exported.InShardings"):
            name = field.split(".")[1]
            generated = [t._tab.Pos for t in _fb.read_tables(table, name)]
            assert generated
            assert _fb.table_positions(table, field) == generated
        tree = table.InTree()
        assert tree is not None
        nodes = [t._tab.Pos for t in _fb.read_tables(tree, "Nodes")]
        assert _fb.table_positions(tree, "PyTreeDef.Nodes") == nodes
