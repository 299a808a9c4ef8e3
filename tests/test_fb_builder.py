"""``export._fb_builder.Builder`` writes exactly the bytes of ``flatbuffers.Builder``.

The function archive's header is built with the faster builder (issue 27 §3: a small save's
header cost more than its fsync); an archive's bytes, and so every registry digest, must not
change with it. Checked two ways: whole archives of several kinds of Exported written with
either builder, and random sequences of the builder calls that the generated code and
``_fb`` make (scalars of every width used, strings, byte, numpy and offset vectors, nested
tables, vtables shared or not, buffers that grow) compared call by call.
"""

from __future__ import annotations

import random

import flatbuffers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from jaxport.export import _fb, _fb_builder


def _mlp():
    def mlp(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return {"out": x, "norm": jnp.sum(x**2)}

    params = [
        (jax.ShapeDtypeStruct((a, b), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
        for a, b in [(8, 6), (6, 3)]
    ]
    return export.export(jax.jit(mlp))(params, jax.ShapeDtypeStruct((2, 8), jnp.float32))


def _sharded():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    f = jax.jit(
        lambda x: jnp.sin(x) @ x.T,
        in_shardings=NamedSharding(mesh, P("x", "y")),
        out_shardings=NamedSharding(mesh, P("x")),
    )
    return export.export(f)(jax.ShapeDtypeStruct((8, 4), jnp.float32))


def _poly():
    (b,) = export.symbolic_shape("b")
    return export.export(jax.jit(lambda x: jnp.cos(x) * x.shape[0]))(
        jax.ShapeDtypeStruct((b, 3), jnp.float32)
    )


@pytest.mark.parametrize("make", [_mlp, _sharded, _poly])
@pytest.mark.parametrize("vjp_order", [0, 1, 2])
def test_archives_are_the_same_bytes_with_either_builder(make, vjp_order, monkeypatch):
    exp = make()
    metadata = {"team": "vision", "step": "12"}
    fast = jaxport.dumps(exp, vjp_order=vjp_order, metadata=metadata)
    monkeypatch.setattr(_fb_builder, "Builder", flatbuffers.Builder)
    assert jaxport.dumps(exp, vjp_order=vjp_order, metadata=metadata) == fast


def _random_calls(rng: random.Random, builder: flatbuffers.Builder) -> int:
    """One random tree of tables; returns the root's offset. The same ``rng`` state makes the
    same calls on any builder."""
    children = [
        _random_calls(rng, builder) for _ in range(rng.choice([0, 0, 0, 1, 2]))
    ]  # depth ends: mostly leaves
    strings = [builder.CreateString("é" * rng.randrange(0, 9)) for _ in range(rng.randrange(3))]
    vectors = []
    for _ in range(rng.randrange(3)):
        kind = rng.randrange(4)
        if kind == 0:
            vectors.append(builder.CreateByteVector(rng.randbytes(rng.randrange(0, 40))))
        elif kind == 1:
            dtype = rng.choice([np.uint32, np.int64, np.uint8, np.int32])
            values = [rng.randrange(0, 100) for _ in range(rng.randrange(0, 7))]
            vectors.append(builder.CreateNumpyVector(np.asarray(values, dtype=dtype)))
        elif kind == 2:
            vectors.append(_fb._offsets_vector(builder, strings + children))
        else:
            vectors.append(_fb.str_vector(builder, ["a" * rng.randrange(5) for _ in range(3)]))
    fields = 12
    builder.StartObject(fields)
    slots = rng.sample(range(fields), rng.randrange(0, fields))
    refs = [*strings, *vectors, *children]
    for slot in slots:
        kind = rng.randrange(8)
        if kind == 0:
            builder.PrependBoolSlot(slot, rng.random() < 0.5, False)
        elif kind == 1:
            builder.PrependUint8Slot(slot, rng.randrange(0, 3), 0)
        elif kind == 2:
            builder.PrependInt32Slot(slot, rng.randrange(-3, 3), 0)
        elif kind == 3:
            builder.PrependUint32Slot(slot, rng.choice([0, 1, 2**32 - 1]), 0)
        elif kind == 4:
            builder.PrependUint64Slot(slot, rng.choice([0, 7, 2**64 - 1]), 0)
        elif kind == 5:
            builder.PrependInt64Slot(slot, rng.choice([-1, 0, 2**40]), 0)
        elif refs:
            builder.PrependUOffsetTRelativeSlot(slot, refs.pop(rng.randrange(len(refs))), 0)
    return int(builder.EndObject())


@pytest.mark.parametrize("seed", range(60))
def test_random_calls_give_the_same_bytes(seed):
    outputs = []
    for cls in (_fb_builder.Builder, flatbuffers.Builder):
        rng = random.Random(seed)
        builder = cls(rng.choice([0, 1, 16, 64, 4096]))  # small ones grow
        roots = [_random_calls(rng, builder) for _ in range(rng.randrange(1, 6))]
        root = _fb._offsets_vector(builder, roots)
        builder.StartObject(1)
        builder.PrependUOffsetTRelativeSlot(0, root, 0)
        builder.Finish(builder.EndObject(), file_identifier=b"JXPT")
        outputs.append(bytes(builder.Output()))
    assert outputs[0] == outputs[1]


def test_misuse_raises_the_library_errors():
    builder = _fb_builder.Builder(64)
    builder.StartObject(2)
    with pytest.raises(flatbuffers.builder.IsNestedError):
        builder.StartObject(1)
    with pytest.raises(flatbuffers.builder.IsNestedError):
        builder.StartVector(4, 1, 4)
    builder.EndObject()
    with pytest.raises(flatbuffers.builder.IsNotNestedError):
        builder.EndObject()
    with pytest.raises(flatbuffers.builder.OffsetArithmeticError):
        builder.PrependUOffsetTRelative(10**6)  # an offset not yet written
    with pytest.raises(flatbuffers.builder.OffsetArithmeticError):
        _fb._offsets_vector(builder, [10**6])
