"""The reader's limits (schema/FORMAT.md, "Limits"), at their exact boundaries, both ways.

What ``dumps`` writes, ``loads`` reads: the writer refuses (``UnsupportedFeatureError``) what
the reader refuses (``CorruptArchiveError``), and both accept everything up to the limit.
Hand-made headers (``_hostile``) test the reader alone, at and just past each limit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _hostile import (
    Aval,
    Level,
    Mesh,
    Named,
    Node,
    Payload,
    Sharding,
    encode_header,
    leaf_tree,
    seal,
    tuple_tree,
)
from jax._src.export import shape_poly

import jaxport
from jaxport.export import _fb, _limits, _shardings
from jaxport.schema import fb

MODULE = b"ML\xefR\x00not a real module\x00"
#: These archives test header limits around a placeholder module, which no reader could parse:
#: read as trusted, so the module is not vetted (the module sandbox: test_sandbox.py).
_loads = functools.partial(jaxport.loads, trusted=True)


def _archive(levels: list[Level], payload: list[Payload] | None = None) -> bytes:
    payload = payload or [Payload(MODULE, fb.Compression.none, len(MODULE))]
    for level in levels:
        level.module = (0, 0, len(MODULE), "1.0.0", [])
    return seal(encode_header(levels, payload), payload)


def _nested(depth: int) -> object:
    tree: object = jnp.zeros(2)
    for _ in range(depth):
        tree = (tree,)
    return tree


def _export_nested(depth: int):
    return jax.export.export(jax.jit(lambda t: jax.tree.leaves(t)[0] + 1))(_nested(depth))


def test_pytree_depth_limit_is_500_levels_when_written() -> None:
    # in_tree is ((t,), {}): two levels above the argument's own nesting.
    exp = _export_nested(_limits.MAX_PYTREE_DEPTH - 3)
    back = _loads(jaxport.dumps(exp))
    x = np.ones(2, np.float32)
    arg: object = x
    for _ in range(_limits.MAX_PYTREE_DEPTH - 3):
        arg = (arg,)
    np.testing.assert_array_equal(back.call(arg), x + 1)
    assert jaxport.inspect(jaxport.dumps(exp)).in_avals[0].path.startswith("[0][0][0]")
    with pytest.raises(jaxport.UnsupportedFeatureError, match="deeper than 500 levels"):
        jaxport.dumps(_export_nested(_limits.MAX_PYTREE_DEPTH - 2))


@pytest.mark.parametrize("levels, ok", [(500, True), (501, False)])
def test_pytree_depth_limit_when_read(levels, ok):
    chain = Node(fb.PyTreeKind.tuple, 1)
    level = Level([chain] * (levels - 1) + [Node()], leaf_tree(), [Aval([3])], [Aval([3])])
    data = _archive([level])
    if ok:
        assert _loads(data).in_tree.num_leaves == 1
        assert len(jaxport.inspect(data).in_avals) == 1
    else:
        for read in (jaxport.loads, jaxport.inspect):
            with pytest.raises(jaxport.CorruptArchiveError, match="deeper than 500 levels"):
                read(data)


def test_a_node_claiming_more_children_than_nodes_follow() -> None:
    level = Level([Node(fb.PyTreeKind.tuple, 3), Node(), Node()], leaf_tree(), [], [Aval([3])])
    level.in_avals = [Aval([3]), Aval([3])]
    with pytest.raises(jaxport.CorruptArchiveError, match="claims 3 children, only 2"):
        _loads(_archive([level]))


@pytest.mark.parametrize("rank, ok", [(_limits.MAX_RANK, True), (_limits.MAX_RANK + 1, False)])
def test_rank_limit(rank, ok):
    shape = (1,) * rank
    data = _archive([Level(tuple_tree(1), leaf_tree(), [Aval(list(shape))], [Aval([3])])])
    if ok:
        assert _loads(data).in_avals[0].shape == shape
        exp = jax.export.export(jax.jit(lambda x: x))(jax.ShapeDtypeStruct(shape, jnp.float32))
        assert _loads(jaxport.dumps(exp)).in_avals[0].shape == shape
    else:
        with pytest.raises(jaxport.CorruptArchiveError, match=f"rank {rank}"):
            _loads(data)
        with pytest.raises(jaxport.UnsupportedFeatureError, match=f"rank {rank}"):
            exp = jax.export.export(jax.jit(lambda x: x))(jax.ShapeDtypeStruct(shape, jnp.float32))
            jaxport.dumps(exp)


def _sum_of_symbols(n: int) -> str:
    return " + ".join(f"a{i}" for i in range(n))


@pytest.mark.parametrize("atoms, ok", [(_limits.MAX_EXPR_ATOMS, True), (33, False)])
def test_expression_atoms_limit_when_read(atoms, ok):
    aval = Aval([-1], [_sum_of_symbols(atoms)])
    data = _archive([Level(tuple_tree(1), leaf_tree(), [aval], [Aval([3])])])
    if ok:
        assert str(_loads(data).in_avals[0].shape[0]).count("a") == atoms
    else:
        with pytest.raises(jaxport.CorruptArchiveError, match="more than 32 symbols"):
            _loads(data)


@pytest.mark.parametrize("atoms, ok", [(_limits.MAX_EXPR_ATOMS, True), (33, False)])
def test_expression_atoms_limit_when_written(atoms, ok):
    dims = jax.export.symbolic_shape(", ".join(f"a{i}" for i in range(atoms)))
    exp = jax.export.export(jax.jit(lambda *xs: jnp.concatenate(xs)))(
        *(jax.ShapeDtypeStruct((d,), jnp.float32) for d in dims)
    )
    if ok:
        back = _loads(jaxport.dumps(exp))
        assert str(back.out_avals[0].shape) == str(exp.out_avals[0].shape)
    else:
        with pytest.raises(jaxport.UnsupportedFeatureError, match="more than 32 symbols"):
            jaxport.dumps(exp)


@pytest.mark.parametrize("n, ok", [(_limits.MAX_CONSTRAINTS, True), (33, False)])
def test_constraint_count_limit(n, ok):
    constraints = [f"b >= {i}" for i in range(n)]
    level = Level(tuple_tree(1), leaf_tree(), [Aval([-1], ["b"])], [Aval([3])])
    level.constraints = constraints
    data = _archive([level])
    if ok:
        _loads(data)
    else:
        with pytest.raises(jaxport.CorruptArchiveError, match="33 symbolic constraints"):
            _loads(data)


def test_symbolic_text_limit_is_shared_by_reader_and_writer() -> None:
    tables = jaxport.export._avals.AvalTables()
    tables.add_symbolic_chars(_limits.MAX_SYMBOLIC_CHARS)
    with pytest.raises(jaxport.UnsupportedFeatureError, match="symbolic"):
        tables.add_symbolic_chars(1)
    budget = _limits.Budget(100)
    budget.charge_symbolic(_limits.MAX_SYMBOLIC_CHARS)
    with pytest.raises(jaxport.CorruptArchiveError, match="symbolic"):
        budget.charge_symbolic(1)


def test_an_expression_that_took_jax_32_s_loads_without_the_decision_procedure(monkeypatch):
    """max/min are built as written: jax's (exponential) decision procedure never runs."""
    text = (
        "min(e*max(b + e + a, mod(5, e)*floordiv(b, a))*b + d - e + min(e, a + b) + 9, "
        "min(b, e - max(d*b + mod(d, a), b)))*1"
    )

    def refuse(*args, **kwargs):
        raise AssertionError("the decision procedure ran")

    monkeypatch.setattr(shape_poly, "_bounds_decision", refuse)
    data = _archive([Level(tuple_tree(1), leaf_tree(), [Aval([-1], [text])], [Aval([3])])])
    (dim,) = _loads(data).in_avals[0].shape
    assert "max(" in str(dim)


def test_golden_and_real_archives_load_without_the_decision_procedure(monkeypatch):
    from pathlib import Path

    golden = Path(__file__).parents[1] / "golden" / "v1_poly_vjp1.jaxport"
    monkeypatch.setattr(shape_poly, "_bounds_decision", None)
    exp = jaxport.load(golden)
    assert str(exp.in_avals[0].shape) == "(b, 4)" and exp.vjp() is not None


@pytest.mark.parametrize(
    "size, ratio, ok",
    [
        (_limits.RATIO_FREE_BYTES, None, True),  # small enough to believe at any ratio
        (_limits.RATIO_FREE_BYTES + 1, None, False),
        (_limits.RATIO_FREE_BYTES + 1, 1e6, True),  # the caller opts in
    ],
)
def test_compression_ratio_bound(size, ratio, ok):
    payload = [Payload.zeros(size)]
    level = Level(tuple_tree(1), leaf_tree(), [Aval([3])], [Aval([3])])
    level.module = (0, 0, 64, "1.0.0", [])
    data = seal(encode_header([level], payload), payload)
    kwargs = {} if ratio is None else {"max_compression_ratio": ratio}
    if ok:
        assert _loads(data, **kwargs).mlir_module_serialized == bytes(64)
    else:
        with pytest.raises(jaxport.CorruptArchiveError, match="a ratio over the limit of 1000"):
            _loads(data, **kwargs)


def test_max_compression_ratio_reaches_load(tmp_path):
    payload = [Payload.zeros(_limits.RATIO_FREE_BYTES + 1)]
    level = Level(tuple_tree(1), leaf_tree(), [Aval([3])], [Aval([3])])
    level.module = (0, 0, 64, "1.0.0", [])
    path = tmp_path / "bomb.jaxport"
    path.write_bytes(seal(encode_header([level], payload), payload))
    with pytest.raises(jaxport.CorruptArchiveError, match="ratio"):
        jaxport.load(path)
    jaxport.load(path, max_compression_ratio=1e6, trusted=True)


@pytest.mark.parametrize(
    "sizes, ok",
    [((2, 4), True), ((0,), False), ((2**31,), False), ((2**10, 2**11), False)],
)
def test_mesh_limits(sizes, ok):
    names = ("x", "y")[: len(sizes)]
    mesh = jax.sharding.AbstractMesh(sizes, names)
    builder = jaxport.export._archive.flatbuffers.Builder(64)
    if ok:
        _shardings.encode_abstract_mesh(builder, mesh)
    else:
        with pytest.raises(jaxport.UnsupportedFeatureError, match="cannot store the mesh"):
            _shardings.encode_abstract_mesh(builder, mesh)
        level = Level(tuple_tree(1), leaf_tree(), [Aval([4])], [Aval([3])])
        level.meshes = [Mesh(list(sizes), list(names), [1] * len(sizes))]
        level.in_shardings = [Sharding(Named(0, [[]]))]
        level.out_shardings, level.has_named_shardings = [Sharding()], True
        with pytest.raises(jaxport.CorruptArchiveError, match="abstract mesh"):
            _loads(_archive([level]))


def test_vjp_chain_must_match_vjp_order() -> None:
    levels = [Level(tuple_tree(1), leaf_tree(), [Aval([3])], [Aval([3])]) for _ in range(2)]
    payload = [Payload(MODULE, fb.Compression.none, len(MODULE))]
    for level in levels:
        level.module = (0, 0, len(MODULE), "1.0.0", [])
    data = seal(encode_header(levels, payload, vjp_order=3), payload)
    with pytest.raises(jaxport.CorruptArchiveError, match="declares vjp_order 3 and holds 1"):
        _loads(data)


def test_bulk_vector_slots_match_the_generated_readers() -> None:
    exp = jax.export.export(jax.jit(lambda x, y: (x, y)))(jnp.zeros(2), jnp.zeros(3))
    data = jaxport.dumps(exp)
    head = jaxport.export._archive.read_header(data, len(data), path=None)
    table = head.archive.Exported()
    for field in ("InAvals", "OutAvals", "InShardings", "OutShardings"):
        positions = _fb.table_positions(table, f"Exported.{field}")
        expected = [t._tab.Pos for t in _fb.read_tables(table, field)]
        assert positions == expected and len(expected) == 2, field
    tree = table.InTree()
    assert _fb.table_positions(tree, "PyTreeDef.Nodes") == [
        t._tab.Pos for t in _fb.read_tables(tree, "Nodes")
    ]


@pytest.mark.parametrize("n, ok", [(_limits.MAX_CONSTRAINTS, True), (33, False)])
def test_constraint_count_limit_when_written(n, ok):
    (b,) = jax.export.symbolic_shape("b", constraints=[f"b >= {i}" for i in range(n)])
    exp = jax.export.export(jax.jit(lambda x: x * 2))(jax.ShapeDtypeStruct((b,), jnp.float32))
    if ok:
        back = _loads(jaxport.dumps(exp))
        assert str(back.in_avals[0].shape) == "(b,)"
    else:
        with pytest.raises(jaxport.UnsupportedFeatureError, match="33 symbolic constraints"):
            jaxport.dumps(exp)
