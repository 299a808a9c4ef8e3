"""Structure-aware generation of hostile archives, and a byte mutator of real ones.

Every generated archive is digest-valid, so what it tests is the reader's handling of the
contents. Randomness comes from a ``Source``: ``RandomSource`` (a seeded ``random.Random``,
for the long campaign of ``fuzz_reader.py``) or ``HypothesisSource`` (hypothesis draws, for
the test suite, where failures shrink). Coverage-guided fuzzing with atheris can drive
``mutate`` through ``fuzz_reader.py --atheris`` where atheris is installed.

The generator aims at the reader's weak points: deep and wide pytrees, unknown enums, huge
and negative dimensions, garbage and explosive symbolic expressions and constraints, bad
meshes and shardings (HloSharding protos included), tables and vectors shared between fields
and between VJP orders, VJP chains whose length disagrees with ``vjp_order``, module ranges
outside their section, and sections that declare impossible decompressed sizes.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from _hostile import (
    Aval,
    Level,
    Mesh,
    Named,
    Node,
    Payload,
    Sharding,
    encode_header,
    reseal,
    seal,
)

from jaxport.schema import fb

__all__ = [
    "HypothesisSource",
    "RandomSource",
    "Source",
    "generators",
    "hostile_archive",
    "mutate",
]

T = TypeVar("T")

#: A stand-in module: readable bytes without custom calls (the reader does not run it).
MODULE = b"ML\xefR\x00jaxport reliability: not a real module\x00" + bytes(range(64))


class Source(Protocol):
    """Where the generator's choices come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``."""

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``."""

    def blob(self, max_size: int) -> bytes:
        """Up to ``max_size`` arbitrary bytes."""


class RandomSource:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]

    def blob(self, max_size: int) -> bytes:
        return self._rng.randbytes(self._rng.randint(0, max_size))


class HypothesisSource:
    """Choices drawn from hypothesis' ``st.data()``, so failures shrink."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self._data, self._st = data, st

    def integer(self, lo: int, hi: int) -> int:
        return int(self._data.draw(self._st.integers(lo, hi)))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def blob(self, max_size: int) -> bytes:
        return bytes(self._data.draw(self._st.binary(max_size=max_size)))


def _maybe(src: Source, p_percent: int) -> bool:
    return src.integer(1, 100) <= p_percent


class _Gen:
    """Draws header fields: each is valid unless ``hostile()`` says otherwise.

    The hostility (the chance that a field is bad) is drawn per archive, from none to a
    quarter, so that some archives are valid but unusual and most fail deep in the reader
    rather than at the first field.
    """

    def __init__(self, src: Source) -> None:
        self.src = src
        self.hostility = src.choice([0, 1, 2, 4, 8, 25])

    def hostile(self) -> bool:
        return self.src.integer(1, 100) <= self.hostility

    def pick(self, good: Sequence[T], bad: Sequence[T]) -> T:
        return self.src.choice(bad) if self.hostile() else self.src.choice(good)

    def percent(self, p: int) -> bool:
        return self.src.integer(1, 100) <= p


_BAD_DIMS = [-2, -7, 2**31, 2**62, 2**63 - 1, -(2**63), -1]
_GOOD_EXPRESSIONS = [
    "b",
    "2*b",
    "b + 4",
    "floordiv(b, 2)",
    "mod(b, 4)",
    "max(b, c)",
    "min(b, 16)",
    "b^2",
    "b*c",
    "-b + 2*c",
]
_BAD_EXPRESSIONS = [
    "max(b",
    "b,c",
    "((b))",
    "1e5",
    "b^99",
    "floordiv(b, 0)",
    "mod(b, 0)",
    "9" * 30,
    "b" + " + b" * 200,
    "max(" * 300 + "b" + ", 1)" * 300,
    "a\nb",
    "'b'",
    "",
    "   ",
    "b +",
    "-5",
    "b - b - 3",
    "min(e*max(b + e + a, mod(5, e)*floordiv(b, a))*b + d - e + min(e, a + b) + 9, min(b, e))",
]
_GOOD_CONSTRAINTS = ["b >= 1", "c <= 64", "b >= c", "mod(b, 4) == 0", "2*a == b"]
_BAD_CONSTRAINTS = [
    "3*a == c",
    "a == b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7",
    "b >= 5",
    "b <= 3",
    "a >= b >= c",
    "a",
    "max(b >= 1",
    "b == b + 1",
    "floordiv(a, 0) >= 1",
    "b >= " + " + ".join(f"c{i}" for i in range(40)),
]


def _expression(g: _Gen) -> str:
    if g.hostile():
        return g.src.choice(_BAD_EXPRESSIONS) if g.percent(70) else _random_expression(g.src, 0)
    return g.src.choice(_GOOD_EXPRESSIONS)


def _random_expression(src: Source, depth: int) -> str:
    r = src.integer(0, 9)
    if depth > 4 or r < 3:
        return src.choice(["a", "b", "c", "d", str(src.integer(0, 9))])
    if r < 6:
        f = src.choice(["max", "min", "mod", "floordiv"])
        return f"{f}({_random_expression(src, depth + 1)}, {_random_expression(src, depth + 1)})"
    op = src.choice([" + ", " - ", "*", "^"])
    right = str(src.integer(0, 20)) if op == "^" else _random_expression(src, depth + 1)
    return f"{_random_expression(src, depth + 1)}{op}{right}"


def _aval(g: _Gen, meshes: list[Mesh]) -> Aval:
    src = g.src
    rank = g.pick([0, 1, 1, 2, 2, 3], [4, 64, 65, 300])
    shape = [g.pick([4, 8, 12, 0, 16], _BAD_DIMS) for _ in range(rank)]
    symbolic = g.percent(25)
    if symbolic and rank:
        shape[src.integer(0, rank - 1)] = -1
    exprs = None
    if -1 in shape or g.hostile():
        exprs = [_expression(g) if d == -1 or g.hostile() else "" for d in shape]
        if exprs and g.hostile():
            exprs = exprs[:-1]
    sharding = None
    if meshes and g.percent(25):
        sharding = _named(g, meshes, rank, -1 not in shape)
    return Aval(
        shape=shape,
        dim_exprs=exprs,
        dtype=g.pick([18, 18, 7, 1, 16, 31, 33], [0, 35, 255, src.integer(0, 40)]),
        prng_impl=g.pick([None], ["threefry2x32", "rbg", "nope", "\x00"]),
        weak_type=g.percent(20),
        memory_space=g.pick([0, 0, 1, 2, 3], [4, 255]),
        vma=g.pick([None, None, []], [["x"], ["x", "x"], ["zz"]]),
        sharding=sharding,
    )


def _named(g: _Gen, meshes: list[Mesh], rank: int, static: bool) -> Named:
    src = g.src
    index = src.integer(0, len(meshes) - 1)
    names = list(meshes[index].names) or ["x"]
    if g.hostile() or not static:
        spec = [
            [src.choice([*names, "q", ""]) for _ in range(src.choice([0, 1, 1, 2]))]
            for _ in range(src.choice([0, 1, 2, rank + 1, 70]))
        ]
    else:
        free = list(dict.fromkeys(names))
        spec = []
        for _ in range(src.integer(0, rank)):
            spec.append([free.pop(src.integer(0, len(free) - 1))] if free and g.percent(50) else [])
    return Named(
        mesh=g.pick([index], [len(meshes), 2**32 - 1]),
        spec=spec,
        reduced=g.pick([[]], [["y"], ["q"], ["x"]]),
        unreduced=g.pick([[]], [["x"], ["q"]]),
        memory_kind=g.pick([None], ["device", "pinned_host", "\x7f", ""]),
    )


def _mesh(g: _Gen) -> Mesh:
    src = g.src
    n = g.pick([1, 1, 2], [0, 3, 70])
    names = ["x", "y", "z"][:n] if n <= 3 else [f"a{i}" for i in range(n)]
    if g.hostile():
        names = [src.choice(["x", "", "x", "w"]) for _ in range(n)]
    sizes = [g.pick([1, 2, 4], [0, 3, 2**31, 2**32 - 1, 2**16]) for _ in range(n)]
    types = [g.pick([1], [2, 3, 0, 4, 255]) for _ in range(n)]
    if g.hostile():
        types = types[:-1]
    device = None
    if g.percent(30):
        device = (g.pick(["cpu", "TPU v5"], [""]), g.pick([-1, 1, 8], [-7]), "cpu")
    return Mesh(sizes, names, types, device)


#: ``xla.OpSharding`` protos: replicated, manual (valid); then tiled ones that fit no aval
#: here, a 2^32-tile iota, a maximal sharding without device, garbage.
_GOOD_HLO = [b"", b"\x08\x04"]
_BAD_HLO = [
    b"\x08\x03\x1a\x02\x02\x04J\x01\x08R\x01\x00",
    b"\x08\x03\x1a\x03\x02\x01\x040\x01J\x01\x08R\x01\x00",
    b'\x08\x03\x1a\x02\x04\x02"\x08\x00\x01\x02\x03\x04\x05\x06\x07',
    b"\x08\x03\x1a\x04\x80\x80\x02\x80\x80\x02\x01\x01J\x01\x80\x80\x80\x80\x04",
    b"\x08\x02",
    b"\x08\x01\x12\x00",
    b"\xff\xff\xff",
    b"\x08\x05",
]


def _sharding(g: _Gen, meshes: list[Mesh], aval: Aval | None) -> Sharding:
    named = None
    if meshes and aval is not None and g.percent(40):
        named = _named(g, meshes, len(aval.shape), -1 not in aval.shape)
    hlo = None
    if g.percent(40):
        hlo = g.src.choice(_BAD_HLO) if g.hostile() else g.src.choice(_GOOD_HLO)
        if g.hostile():
            hlo = g.src.blob(24)
    return Sharding(named, hlo, derived=hlo is not None and g.percent(20))


def _tree(g: _Gen, n_leaves: int) -> list[Node]:
    src = g.src
    if not g.hostile():
        leaf = Node()
        nodes = [Node(fb.PyTreeKind.tuple, 2), Node(fb.PyTreeKind.tuple, n_leaves)]
        nodes += [leaf if g.percent(50) else Node() for _ in range(n_leaves)]
        return [*nodes, Node(fb.PyTreeKind.dict, 0, dict_keys=[])]
    shape = src.integer(0, 5)
    if shape == 0:  # around the depth limit
        depth = src.choice([498, 499, 500, 501, 2000])
        node = Node(fb.PyTreeKind.tuple, 1)
        return [node] * (depth - 1) + [Node()]
    if shape == 1:  # wide claims
        return [Node(fb.PyTreeKind.tuple, src.choice([2**20, 2**31, 2**32 - 1]))] * 8
    if shape == 2:  # dicts with bad keys
        keys = src.choice([["b", "a"], ["a", "a"], ["a"], ["\x00", "a"], ["a", "b", "c"]])
        return [Node(fb.PyTreeKind.dict, 2, dict_keys=keys), Node(), Node()]
    if shape == 3:  # custom nodes, registered or not, with good or bad auxdata
        name = src.choice(["tests.reliability.Pair", "no.such.node", ""])
        aux = src.choice([b"\x01", b"", b"\x01\x02", src.blob(8)])
        return [Node(fb.PyTreeKind.custom, 2, custom_name=name, custom_auxdata=aux), Node(), Node()]
    if shape == 4:  # a leaf count off by one
        n = max(0, n_leaves + src.choice([-1, 1]))
        return [Node(fb.PyTreeKind.tuple, n)] + [Node() for _ in range(n)]
    return [  # random kinds and counts
        Node(src.integer(0, 8), src.choice([0, 0, 1, 2, 3]), dict_keys=src.choice([None, ["k"]]))
        for _ in range(src.integer(0, 12))
    ]


def _level(g: _Gen, shared: list[Aval]) -> Level:
    src = g.src
    meshes = [_mesh(g) for _ in range(src.choice([0, 0, 1, 1, 2]))]
    n_in, n_out = src.integer(0, 4), src.integer(0, 3)
    pool = shared if shared and g.percent(40) and not meshes else None
    in_avals = [src.choice(pool) if pool else _aval(g, meshes) for _ in range(n_in)]
    out_avals = [src.choice(pool) if pool else _aval(g, meshes) for _ in range(n_out)]
    shared.extend(a for a in in_avals + out_avals if a.sharding is None and a.dim_exprs is None)
    extra = [None] if g.hostile() else []
    in_sh = [_sharding(g, meshes, a) for a in [*in_avals, *extra]]
    out_sh = [_sharding(g, meshes, a) for a in out_avals]
    symbolic = any(a.dim_exprs for a in in_avals + out_avals)
    constraints = [src.choice(_GOOD_CONSTRAINTS) for _ in range(src.choice([0, 1]))]
    if g.hostile():
        constraints = [src.choice(_BAD_CONSTRAINTS) for _ in range(src.choice([1, 2, 40]))]
    return Level(
        in_tree=_tree(g, n_in) if not g.hostile() or g.percent(90) else None,
        out_tree=_tree(g, n_out) if not g.hostile() or g.percent(90) else None,
        in_avals=in_avals,
        out_avals=out_avals,
        fun_name=_fun_name(g),
        constraints=constraints if symbolic or g.hostile() else None,
        meshes=meshes,
        in_shardings=in_sh,
        out_shardings=out_sh,
        has_named_shardings=g.percent(50),
        nr_devices=g.pick([1, 8], [0, 2**21, 2**32 - 1]),
        platforms=g.pick([["cpu"], ["cpu", "cuda"]], [[], ["\x00"]]),
        ordered_effects=g.pick([None], [["<class 'jax._src.debugging.OrderedDebugEffect'>"]]),
        unordered_effects=g.pick([None], [["<class 'jax._src.core.GenericEffect'>"], ["x"]]),
        disabled_checks=_disabled_checks(g),
        kept_var_idx=g.pick([None, list(range(n_in))], [[1, 0], [0, 0], [2**31]]),
        uses_global_constants=g.percent(10),
        calling_convention_version=g.pick([9, 10], [0, 8, 11, 2**32 - 1]),
        module=(
            g.pick([0], [1, 7]),
            g.pick([0], [5, 2**63]),
            g.pick([len(MODULE)], [0, len(MODULE) + 1, 2**40]),
            g.pick(["1.0.0", ""], ["\xff"]),
            g.pick([[]], [["lapack_sgeqrf"], ["b", "a"]]),
        ),
    )


def _fun_name(g: _Gen) -> bytes | str:
    return g.src.choice([b"\xff\xfe", b"a\x00b"]) if g.hostile() else g.src.choice(["f", "", "λ"])


def _disabled_checks(g: _Gen) -> list[tuple[int, str | None]] | None:
    if g.hostile():
        return g.src.choice([[(2, "foo")], [(7, None)], [(0, None)]])
    return g.src.choice([None, [(1, None)]])


def _payload(g: _Gen) -> list[Payload]:
    src = g.src
    section = Payload.zstd(MODULE)
    if g.hostile():
        r = src.integer(0, 3)
        if r == 0:  # a ratio bomb: a real frame of zeros
            section = Payload.zeros(src.choice([2**20, 2**24 + 1, 2**30]))
        elif r == 1:  # a lie about the size
            size = src.choice([2**30, 2**40, 0, len(MODULE) + 1])
            section = Payload(section.stored, fb.Compression.zstd, size)
        elif r == 2:
            section = Payload(src.blob(64), src.choice([1, 2, 3]), src.choice([0, 64, 2**20]))
        else:
            return [section, Payload.zstd(MODULE)]
    elif g.percent(20):
        section = Payload(MODULE, fb.Compression.none, len(MODULE))
    return [section]


def hostile_archive(src: Source) -> bytes:
    """A digest-valid archive whose header may contain anything (see the module docstring)."""
    g = _Gen(src)
    shared: list[Aval] = []
    levels = [_level(g, shared) for _ in range(src.choice([1, 1, 2, 2, 3, 4]))]
    if len(levels) > 1 and g.hostile():  # share whole vectors across VJP orders
        for level in levels[1:]:
            level.in_avals = levels[0].in_avals
            level.in_tree = levels[0].in_tree
            level.in_shardings = levels[0].in_shardings
    vjp_order = g.pick([len(levels) - 1], [0, 1, 7])
    payload = _payload(g)
    metadata = g.pick([[("k", "v")], []], [[("k\xff", ""), ("a", "b" * 100)]])
    header = encode_header(levels, payload, vjp_order=vjp_order, metadata=metadata)
    return seal(header, payload)


def mutate(src: Source, archive: bytes) -> bytes:
    """``archive`` with a few bytes changed, cut or appended, then every digest recomputed."""
    data = bytearray(archive)
    header_end = 56 + int.from_bytes(archive[16:24], "little")
    for _ in range(src.integer(1, 8)):
        if _maybe(src, 80):  # mostly in the header, where the decoders are
            i = src.integer(56, max(56, min(header_end, len(data)) - 1))
        else:
            i = src.integer(0, len(data) - 1)
        data[i] = src.choice([0, 1, 0x7F, 0x80, 0xFF, src.integer(0, 255), data[i] ^ 1])
    if _maybe(src, 10):
        data = data[: src.integer(0, len(data))]
    if _maybe(src, 5):
        data += src.blob(16)
    return reseal(bytes(data))


def generators(real: Sequence[bytes]) -> list[Callable[[Source], bytes]]:
    """The case makers of a campaign: hostile headers, and mutations of each real archive."""
    makers: list[Callable[[Source], bytes]] = [hostile_archive, hostile_archive]
    makers.extend(functools.partial(_mutate_archive, archive) for archive in real)
    return makers


def _mutate_archive(archive: bytes, src: Source) -> bytes:
    return mutate(src, archive)
