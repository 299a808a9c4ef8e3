"""Running one case against the reader, and the real archives the mutator starts from."""

from __future__ import annotations

import dataclasses
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import jaxport

__all__ = [
    "Outcome",
    "Pair",
    "check_archive",
    "check_model_archive",
    "real_archives",
    "real_model_archive",
    "register_pair",
]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What reading one archive did.

    Attributes:
        raw: the exception that escaped, when it is not a ``JaxportError`` (must never be).
        error: the JaxportError class name, or None when the archive loaded.
        seconds: wall time of ``loads`` (with every VJP) and ``inspect`` together.
        peak_bytes: the most memory allocated at once (tracemalloc), when measured.
    """

    raw: BaseException | None
    error: str | None
    seconds: float
    peak_bytes: int | None


def check_archive(data: bytes, *, measure_memory: bool = False) -> Outcome:
    """Reads ``data`` with ``loads`` (then each ``.vjp()``) and with ``inspect``."""
    if measure_memory:
        tracemalloc.start()
    start = time.perf_counter()
    raw, error = None, None
    try:
        for read in (_load_all, jaxport.inspect):
            try:
                read(data)
            except jaxport.JaxportError as e:
                error = error or type(e).__name__
    except Exception as e:
        raw = e
    seconds = time.perf_counter() - start
    peak = None
    if measure_memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Outcome(raw, error, seconds, peak)


def check_model_archive(data: bytes) -> BaseException | None:
    """Reads ``data`` with ``loads_model`` (then every tensor) and ``inspect``: the exception
    that escaped as something else than a ``JaxportError``, or None."""
    for read in (_load_model, jaxport.inspect):
        try:
            read(data)
        except jaxport.JaxportError:
            pass
        except Exception as e:
            return e
    return None


def _load_model(data: bytes) -> None:
    model = jaxport.loads_model(data)
    _ = model.params, model.tensors, model.exported


def real_model_archive(*, compress: bool = False) -> bytes:
    """A small model archive: two methods (one with a VJP), five tensors, no custom call;
    ``compress``: the 8 KiB tensor ``t`` is a zstd frame (format version 3)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params = {"w": np.ones((4, 3), np.float32), "b": np.zeros(3, np.float32), "s": np.int8(2)}
    params["e"] = np.arange(6, dtype=np.float32).reshape(3, 2)
    params["t"] = np.repeat(np.arange(8, dtype=np.float32), 256)
    model = jaxport.Model(
        params,
        {"f": lambda p, x: x @ p["w"] + p["b"], "g": lambda p, i: p["e"][i] * p["s"]},
        {
            "f": [jax.ShapeDtypeStruct((2, 4), jnp.float32)],
            "g": [jax.ShapeDtypeStruct((2,), "int32")],
        },
        vjp_order={"f": 1, "g": 0},
    )
    return model.dumps(compress=compress)


def _load_all(data: bytes) -> None:
    exported = jaxport.loads(data)
    while exported.has_vjp():
        exported = exported.vjp()


@dataclasses.dataclass(frozen=True)
class Pair:
    """A custom pytree node registered for serialization, whose auxdata is a tag byte."""

    left: Any
    right: Any
    tag: int = 0


_REGISTERED: list[bool] = []


def register_pair() -> None:
    """Registers ``Pair`` with jax and jax.export (once); its deserializer refuses bad bytes."""
    if _REGISTERED:
        return
    import jax

    def unflatten(tag: int, children: Any) -> Pair:
        left, right = children
        return Pair(left, right, tag)

    def deserialize(aux: bytes) -> int:
        if len(aux) != 1:
            raise ValueError(f"a Pair tag is one byte, got {len(aux)}")
        return aux[0]

    jax.tree_util.register_pytree_node(Pair, lambda p: ((p.left, p.right), p.tag), unflatten)
    jax.export.register_pytree_node_serialization(
        Pair,
        serialized_name="tests.reliability.Pair",
        serialize_auxdata=lambda tag: bytes([tag]),
        deserialize_auxdata=deserialize,
    )
    _REGISTERED.append(True)


def real_archives() -> list[bytes]:
    """Small real archives covering the header's features: VJPs, symbolic shapes with
    constraints, named shardings over a mesh, custom and dict pytrees, PRNG keys."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    register_pair()
    archives = []
    sin = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(jnp.zeros((4, 4)))
    archives.append(jaxport.dumps(sin, vjp_order=2, metadata={"k": "v"}))
    a, b = jax.export.symbolic_shape("a, b", constraints=["a >= b", "mod(b, 2) == 0"])
    poly = jax.export.export(jax.jit(lambda x, y: (x * 2, jnp.concatenate([y, y]))))(
        jax.ShapeDtypeStruct((a, 3), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.int32)
    )
    archives.append(jaxport.dumps(poly, vjp_order=1))
    if len(jax.devices()) >= 8:
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
        sharded = jax.export.export(
            jax.jit(
                lambda t: {"s": t["w"] @ t["v"], "n": None},
                in_shardings=jax.sharding.NamedSharding(mesh, P("x", "y")),
            )
        )({"w": jax.ShapeDtypeStruct((8, 8), jnp.float32), "v": jnp.zeros((8, 8))})
        archives.append(jaxport.dumps(sharded, vjp_order=1))
    pair = jax.export.export(jax.jit(lambda p: Pair(p.right, p.left, 3)))(
        Pair(jnp.zeros(2), jnp.ones((3,), jnp.int8), 7)
    )
    archives.append(jaxport.dumps(pair))
    keys = jax.export.export(jax.jit(lambda k: jax.random.split(k)))(jax.random.key(0))
    archives.append(jaxport.dumps(keys))
    return archives


def campaign(
    makers: list[Callable[[Any], bytes]], source: Callable[[int], Any], cases: int
) -> list[tuple[int, bytes]]:
    """The first ``cases`` archives of a campaign: case ``i`` comes from ``source(i)``."""
    return [(i, makers[i % len(makers)](source(i))) for i in range(cases)]
