"""Writes the adversarial corpus: one small, digest-valid archive per known attack on the reader.

Each file reproduces a failure of the reader before issue 9 (``ATTACKS[i].before``): a raw
exception out of ``loads``, a raw exception out of ``.vjp()`` (the VJP tables were decoded
lazily), or a header that took seconds and gigabytes. ``test_corpus.py`` reads every file and
checks the error class and message now expected. The archives are built field by field with
``_hostile`` (no jax export, no zstd compressor: the ratio bomb is a hand-made frame of RLE
blocks), so the output is the same bytes on every machine. Regenerate from the repository
root, and commit the result:

    python tests/reliability/make_corpus.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import flatbuffers

sys.path.insert(0, str(Path(__file__).parent))

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

from jaxport.schema import fb

CORPUS = Path(__file__).with_name("corpus")
#: Module bytes without custom calls: the reader checks, never runs, them.
MODULE = b"ML\xefR\x00jaxport reliability corpus: not a real module\x00"
_PAYLOAD = [Payload(MODULE, fb.Compression.none, len(MODULE))]
_MODULE_REF: tuple[int, int, int, str, list[str]] = (0, 0, len(MODULE), "1.0.0", [])
_EXPLICIT = fb.AxisType.Explicit


@dataclasses.dataclass(frozen=True)
class Attack:
    """One corpus file: how it is made, what the reader must raise, what it did before."""

    name: str
    make: Callable[[], bytes]
    error: str
    fragment: str
    before: str


def _archive(levels: list[Level], payload: list[Payload] | None = None) -> bytes:
    payload = _PAYLOAD if payload is None else payload
    for level in levels:
        level.module = _MODULE_REF
    return seal(encode_header(levels, payload), payload)


def _one(aval: Aval, **fields: object) -> Level:
    """A primal of one input ``aval`` and one output f32[3]."""
    return Level(tuple_tree(1), leaf_tree(), [aval], [Aval([3])], **fields)  # type: ignore[arg-type]


def _with_vjp(vjp: Level) -> bytes:
    return _archive([_one(Aval([3])), vjp])


def _vjp_level(**fields: object) -> Level:
    return Level(tuple_tree(2), leaf_tree(), [Aval([3]), Aval([3])], [Aval([3])], **fields)  # type: ignore[arg-type]


def duplicate_spec() -> bytes:
    mesh = Mesh([2], ["x"], [fb.AxisType.Auto])
    named = Named(0, [["x"], ["x"]])
    level = _one(Aval([4, 4]), meshes=[mesh], in_shardings=[Sharding(named)])
    level.out_shardings, level.has_named_shardings = [Sharding()], True
    return _archive([level])


def repeated_equality() -> bytes:
    return _archive([_one(Aval([-1], ["a"]), constraints=["2*a == b", "3*a == c"])])


def division_by_zero() -> bytes:
    return _archive([_one(Aval([-1], ["max(b, floordiv(a, 0))"]))])


def zero_axis() -> bytes:
    mesh = Mesh([0], ["x"], [_EXPLICIT])
    return _archive([_one(Aval([4], sharding=Named(0, [["x"]])), meshes=[mesh])])


def rank_above_aval() -> bytes:
    mesh = Mesh([2], ["x"], [_EXPLICIT])
    return _archive([_one(Aval([], sharding=Named(0, [["x"]])), meshes=[mesh])])


def unclosed_max() -> bytes:
    return _archive([_one(Aval([-1], ["max(b"]))])


def axis_2_31() -> bytes:
    mesh = Mesh([2**31], ["x"], [fb.AxisType.Auto])
    level = _one(Aval([3]), meshes=[mesh], in_shardings=[Sharding(Named(0, [["x"]]))])
    level.out_shardings, level.has_named_shardings = [Sharding()], True
    return _archive([level])


def vjp_bad_utf8() -> bytes:
    return _with_vjp(_vjp_level(fun_name=b"\xff\xfe"))


def vjp_bad_effect() -> bytes:
    return _with_vjp(_vjp_level(unordered_effects=["<class 'jax._src.core.GenericEffect'>"]))


def vjp_deep_tree() -> bytes:
    chain = Node(fb.PyTreeKind.tuple, 1)
    level = _vjp_level()
    level.in_avals = [Aval([3])]
    level.in_tree = [chain] * 1999 + [Node()]
    return _with_vjp(level)


def vjp_bad_memory_kind() -> bytes:
    mesh = Mesh([2], ["x"], [_EXPLICIT])
    aval = Aval([4], sharding=Named(0, [["x"]], memory_kind="\x7f"))
    level = _vjp_level(meshes=[mesh])
    level.in_avals = [Aval([3]), aval]
    return _with_vjp(level)


def vjp_struct_error() -> bytes:
    """The VJP's first input aval points outside the header (a forged offset)."""
    marker = Aval([123456789])
    level = _vjp_level()
    level.in_avals = [marker, Aval([3])]
    data = bytearray(_with_vjp(level))
    # The aval vector holds a uoffset to the marker's table; point it 2 GiB away.
    header_length = struct.unpack_from("<Q", data, 16)[0]
    header = bytes(data[56 : 56 + header_length])
    vjp = fb.Archive.GetRootAs(header, 0).Exported().Vjp()
    slot = vjp._tab.Vector(vjp._tab.Offset(10))
    struct.pack_into("<I", data, 56 + slot, 0x7FFFFFF0)
    data[24:56] = hashlib.sha256(data[56 : 56 + header_length]).digest()
    return bytes(data)


def deep_tuples() -> bytes:
    """50,000 nested tuples, all one shared node table (200 KB)."""
    chain = Node(fb.PyTreeKind.tuple, 1)
    level = _one(Aval([3]))
    level.in_tree = [chain] * 50_000 + [Node()]
    return _archive([level])


def wide_claims() -> bytes:
    """16,384 references to a node claiming 1,000,000 children (64 KB)."""
    level = _one(Aval([3]))
    level.in_tree = [Node(fb.PyTreeKind.tuple, 1_000_000)] * 16_384
    return _archive([level])


def shared_avals() -> bytes:
    """60,000 inputs, all one shared aval table of rank 64 (240 KB), under a one-leaf tree."""
    aval = Aval([1] * 64)
    level = _one(aval)
    level.in_avals = [aval] * 60_000
    level.in_shardings = [Sharding()] * 60_000
    return _archive([level])


def shared_vectors() -> bytes:
    """9 levels (the primal and 8 VJP orders, ``MAX_VJP_ORDER``) sharing one vector of 20,000
    avals and one tree (90 KB); before the bound on VJP orders, 300 levels."""
    aval = Aval([3])
    in_avals = [aval] * 20_000
    shardings = [Sharding()] * 20_000
    leaf = Node()
    tree = [Node(fb.PyTreeKind.tuple, 2), Node(fb.PyTreeKind.tuple, 20_000)]
    tree += [leaf] * 20_000 + [Node(fb.PyTreeKind.dict, 0, dict_keys=[])]
    out_tree, out_avals = leaf_tree(), [aval]
    levels = [Level(tree, out_tree, in_avals, out_avals, in_shardings=shardings) for _ in range(9)]
    return _archive(levels)


def vjp_levels() -> bytes:
    """300 VJP orders of one small level (a walk of the chain holds and hashes every level)."""
    return _archive([_one(Aval([3])) for _ in range(300)])


def expression_bomb() -> bytes:
    """One dimension expression of 20,000 terms (172 KB)."""
    return _archive([_one(Aval([-1], [" + ".join(f"{i}*b" for i in range(20_000))]))])


def expansion_bomb() -> bytes:
    """``a == b0 + ... + b7`` makes jax expand ``a^8`` to 6,435 terms (1.1 s)."""
    rule = "a == " + " + ".join(f"b{i}" for i in range(8))
    return _archive([_one(Aval([-1], ["a^8"]), constraints=[rule])])


def zstd_ratio_bomb() -> bytes:
    """A 32 KB zstd frame of RLE blocks that declares, and holds, 1 GiB of zeros."""
    payload = [Payload.zeros(2**30)]
    level = _one(Aval([3]))
    level.module = (0, 0, 64, "1.0.0", [])
    return seal(encode_header([level], payload), payload)


def shared_sections() -> bytes:
    """20,000 references to one empty section table: they tile an empty payload (80 KB)."""
    b = flatbuffers.Builder(1024)
    digest = b.CreateByteVector(hashlib.sha256(b"").digest())
    fb.SectionStart(b)
    fb.SectionAddCompression(b, fb.Compression.none)
    fb.SectionAddSha256(b, digest)
    section = fb.SectionEnd(b)
    b.StartVector(4, 20_000, 4)
    for _ in range(20_000):
        b.PrependUOffsetTRelative(section)
    sections = b.EndVector()
    fb.ArchiveStart(b)
    fb.ArchiveAddSections(b, sections)
    b.Finish(fb.ArchiveEnd(b), file_identifier=b"JXPA")
    return seal(bytes(b.Output()), [])


ATTACKS = [
    Attack(
        "duplicate_spec",
        duplicate_spec,
        "CorruptArchiveError",
        "in_shardings[0]: a PartitionSpec that uses a mesh axis twice",
        "raw DuplicateSpecError from loads",
    ),
    Attack(
        "repeated_equality",
        repeated_equality,
        "CorruptArchiveError",
        "symbolic_constraints: NotImplementedError: Found multiple equality constraints",
        "raw NotImplementedError from loads",
    ),
    Attack(
        "division_by_zero",
        division_by_zero,
        "CorruptArchiveError",
        "in_avals[0]: dimension 0: expression 'max(b, floordiv(a, 0))': floordiv by zero",
        "raw InconclusiveDimensionOperation from loads",
    ),
    Attack(
        "zero_axis",
        zero_axis,
        "CorruptArchiveError",
        "meshes: an abstract mesh with axis sizes (0,) not all in 1..2147483647",
        "raw ZeroDivisionError from loads",
    ),
    Attack(
        "rank_above_aval",
        rank_above_aval,
        "CorruptArchiveError",
        "in_avals[0]: a PartitionSpec of 1 entries for rank 0",
        "raw AssertionError from loads",
    ),
    Attack(
        "unclosed_max",
        unclosed_max,
        "CorruptArchiveError",
        "expression 'max(b': unexpected end",
        "raw tokenize.TokenError from loads",
    ),
    Attack(
        "axis_2_31",
        axis_2_31,
        "CorruptArchiveError",
        "axis sizes (2147483648,) not all in 1..2147483647",
        "raw RuntimeError: std::bad_cast from loads",
    ),
    Attack(
        "vjp_bad_utf8",
        vjp_bad_utf8,
        "CorruptArchiveError",
        "the VJP of order 1: fun_name: UnicodeDecodeError",
        "loads succeeded; raw UnicodeDecodeError from .vjp()",
    ),
    Attack(
        "vjp_bad_effect",
        vjp_bad_effect,
        "CorruptArchiveError",
        "the VJP of order 1: unordered_effects[0]: TypeError",
        "loads succeeded; raw TypeError from .vjp()",
    ),
    Attack(
        "vjp_deep_tree",
        vjp_deep_tree,
        "CorruptArchiveError",
        "the VJP of order 1: in_tree: pytree deeper than 500 levels",
        "loads succeeded; raw RecursionError from .vjp()",
    ),
    Attack(
        "vjp_bad_memory_kind",
        vjp_bad_memory_kind,
        "CorruptArchiveError",
        "the VJP of order 1: in_avals[1]: ValueError",
        "loads succeeded; raw ValueError from .vjp()",
    ),
    Attack(
        "vjp_struct_error",
        vjp_struct_error,
        "CorruptArchiveError",
        "the VJP of order 1: in_avals[0]: struct.error: unpack_from requires a buffer",
        "loads succeeded; raw struct.error from .vjp()",
    ),
    Attack(
        "deep_tuples",
        deep_tuples,
        "CorruptArchiveError",
        "in_tree: pytree deeper than 500 levels",
        "loads: RecursionError (translated); inspect: 10+ s",
    ),
    Attack(
        "wide_claims",
        wide_claims,
        "CorruptArchiveError",
        "in_tree: pytree node 0 claims 1000000 children, only 16383 nodes follow",
        "inspect: gigabytes of key paths",
    ),
    Attack(
        "shared_avals",
        shared_avals,
        "CorruptArchiveError",
        "in_tree: pytree definition has fewer leaves than avals",
        "each reference decoded again: seconds and 1 GiB",
    ),
    Attack(
        "shared_vectors",
        shared_vectors,
        "CorruptArchiveError",
        "the header refers to its own parts more than its",
        "every VJP order decodes the same 20,000 avals and tree again",
    ),
    Attack(
        "vjp_levels",
        vjp_levels,
        "CorruptArchiveError",
        "stores VJP orders up to 299; at most 8 are read",
        "read (300 levels: a chain of identical version-4 levels held 3.4 GB from 828 KB)",
    ),
    Attack(
        "expression_bomb",
        expression_bomb,
        "CorruptArchiveError",
        "longer than 256 characters",
        "jax's parser did not finish in 60 s",
    ),
    Attack(
        "expansion_bomb",
        expansion_bomb,
        "CorruptArchiveError",
        "may expand to more than 256 terms under the equality constraints",
        "1.1 s and 6,435 terms for one dimension",
    ),
    Attack(
        "shared_sections",
        shared_sections,
        "CorruptArchiveError",
        "20000 payload sections (limit 1024)",
        "a Section object per reference: 1,000,000 from a 4 MB header",
    ),
    Attack(
        "zstd_ratio_bomb",
        zstd_ratio_bomb,
        "CorruptArchiveError",
        "section 0 declares 1073741824 bytes decompressed from 32781 stored",
        "1.2 GiB allocated",
    ),
]


def main() -> None:
    CORPUS.mkdir(exist_ok=True)
    for attack in ATTACKS:
        path = CORPUS / f"{attack.name}.jaxport"
        data = attack.make()
        path.write_bytes(data)
        print(f"{path.name:32s} {len(data):>8d} bytes")


if __name__ == "__main__":
    main()
