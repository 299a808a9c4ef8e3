"""What a reader accepts, and the work budget of one header (schema/FORMAT.md, "Limits").

A header is untrusted: a digest proves it was not damaged, not that its author meant well. So
every count it declares is bounded, and the writer refuses what the reader would refuse
(``UnsupportedFeatureError``), so that whatever ``dumps`` writes, ``loads`` reads.

FlatBuffers lets many references point at one table or vector, so a small header can describe
a large object graph. The reader caches what a legitimate writer shares (aval tables) and
charges everything else it reads to a ``Budget`` of a few times the header's size: the time
and memory of a read are linear in the header's size whatever its contents.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from jaxport import CorruptArchiveError

__all__ = [
    "BUDGET_FACTOR",
    "BUDGET_SLACK",
    "MAX_AVALS",
    "MAX_CHILDREN",
    "MAX_COMPRESSION_RATIO",
    "MAX_CONSTRAINTS",
    "MAX_DEVICES",
    "MAX_EXPR_ATOMS",
    "MAX_EXPR_CHARS",
    "MAX_EXPR_EXPANSION",
    "MAX_EXPR_EXPONENT",
    "MAX_EXPR_NESTING",
    "MAX_MESH_AXES",
    "MAX_MESH_AXIS_SIZE",
    "MAX_PYTREE_DEPTH",
    "MAX_PYTREE_NODES",
    "MAX_RANK",
    "MAX_SYMBOLIC_CHARS",
    "MAX_VJP_ORDER",
    "MAX_WINDOW_LOG",
    "RATIO_FREE_BYTES",
    "Budget",
    "charge",
    "charge_symbolic",
    "check_vjp_order",
    "header_budget",
    "resumed_budget",
    "within_ratio",
]

#: Levels of a PyTreeDef, the root counting as one.
MAX_PYTREE_DEPTH = 500
#: Nodes of one PyTreeDef.
MAX_PYTREE_NODES = 2**22
#: Children of one pytree node.
MAX_CHILDREN = 2**20
#: Flat inputs, and flat outputs, of one Exported.
MAX_AVALS = 2**20
#: Dimensions of one aval: numpy's ``NPY_MAXDIMS`` (64 since numpy 2.0); no array of higher
#: rank can be passed to ``Exported.call``.
MAX_RANK = 64
#: Characters of one symbolic dimension expression or constraint.
MAX_EXPR_CHARS = 256
#: Symbols and integer literals in one expression or constraint.
MAX_EXPR_ATOMS = 32
#: Parentheses nesting of one expression (``max(a, min(b, ...))``).
MAX_EXPR_NESTING = 8
#: The largest exponent of ``a^k`` (jax multiplies ``a`` by itself ``k`` times).
MAX_EXPR_EXPONENT = 16
#: Terms one expression may expand to when equality constraints rewrite its factors
#: (``a == b + c`` makes ``a^8`` nine terms): a bound computed from the text.
MAX_EXPR_EXPANSION = 256
#: Explicit symbolic constraints of one Exported.
MAX_CONSTRAINTS = 32
#: Characters of all distinct symbolic expressions and constraints, over all VJP orders:
#: jax parses them at some 10-40 us a character (measured, jax 0.10.2).
MAX_SYMBOLIC_CHARS = 16 * 2**10
#: VJP orders one Exported may store (a chain of at most 9 levels; as many as are read from
#: jax-native bytes, ``_native.MAX_NATIVE_VJP_ORDER``). A VJP level of format
#: version 4 declares only what it adds to the module before it, which its frame may copy, so
#: identical levels cost a few hundred bytes each while a reader walking the chain holds and
#: hashes each level whole: an 828 KB archive of 200 levels of one 16 MiB module made a push
#: hold 3.4 GB (found by fuzzing). The bound keeps a walk within 9x the compression-ratio
#: bound; jax's own tests and users store orders 1 to 3.
MAX_VJP_ORDER = 8
#: Axes of one mesh (a mesh's device array is a numpy array of that rank).
MAX_MESH_AXES = 64
#: Size of one mesh axis: XLA holds it in an int32.
MAX_MESH_AXIS_SIZE = 2**31 - 1
#: Devices of a mesh, of an HloSharding's tile assignment, and ``nr_devices``.
MAX_DEVICES = 2**20
#: Declared decompressed size over stored size that a reader believes by default: dense
#: StableHLO compresses 1-3x, each stored VJP order repeats the constants (x(order + 1));
#: identity or mostly-zero constants reach 500-6,000x, zstd's ceiling is about 32,000x (all
#: measured). Over it, ``loads(..., max_compression_ratio=...)`` opts in.
MAX_COMPRESSION_RATIO = 1000
#: Sections that decompress to at most this many bytes are believed at any ratio; the same
#: allowance holds for all the zstd sections of an archive together (``within_ratio``).
RATIO_FREE_BYTES = 16 * 2**20
#: The largest zstd window (log2, bytes) a writer uses and a reader accepts: 2 GiB.
MAX_WINDOW_LOG = 31
#: The work budget of a header, in bytes read: ``BUDGET_FACTOR * len(header) + BUDGET_SLACK``.
BUDGET_FACTOR = 4
BUDGET_SLACK = 64 * 2**10


class Budget:
    """Bytes a reader may still read from one header, and symbolic characters it may parse."""

    def __init__(self, header_length: int) -> None:
        self.header_length = header_length
        self.remaining = BUDGET_FACTOR * header_length + BUDGET_SLACK
        self.symbolic_remaining = MAX_SYMBOLIC_CHARS

    def charge(self, nbytes: int) -> None:
        """Counts ``nbytes`` read.

        Raises:
            CorruptArchiveError: the header's parts were read more than its size allows (its
                tables or vectors are shared in a way no writer shares them).
        """
        self.remaining -= nbytes
        if self.remaining < 0:
            raise CorruptArchiveError(
                f"the header refers to its own parts more than its {self.header_length} bytes "
                f"allow (limit: {BUDGET_FACTOR}x its size + {BUDGET_SLACK} bytes read)"
            )

    def charge_symbolic(self, nchars: int) -> None:
        """Counts ``nchars`` of symbolic expressions about to be parsed.

        Raises:
            CorruptArchiveError: more than MAX_SYMBOLIC_CHARS characters in all.
        """
        self.symbolic_remaining -= nchars
        if self.symbolic_remaining < 0:
            raise CorruptArchiveError(
                f"more than {MAX_SYMBOLIC_CHARS} characters of distinct symbolic expressions "
                "and constraints"
            )


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "jaxport_header_budget", default=None
)


@contextlib.contextmanager
def header_budget(header_length: int) -> Iterator[Budget]:
    """Makes a fresh ``Budget`` for a header of ``header_length`` bytes the current one.

    A budget already current (an outer read of the same header) stays current.
    """
    budget = _CURRENT.get()
    if budget is not None:
        yield budget
        return
    budget = Budget(header_length)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def resumed_budget(budget: Budget) -> Iterator[Budget]:
    """Makes ``budget`` (what a read of the same header left) the current one again: a VJP
    level decoded when ``.vjp()`` asks spends what the header's read at load left, so all of
    a header's reads together stay within one budget."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def charge(nbytes: int) -> None:
    """Charges ``nbytes`` to the current budget (none outside ``header_budget``)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.charge(nbytes)


def charge_symbolic(nchars: int) -> None:
    """Charges ``nchars`` symbolic characters to the current budget, if any."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.charge_symbolic(nchars)


def within_ratio(declared: int, stored: int, ratio: float = MAX_COMPRESSION_RATIO) -> bool:
    """Whether ``declared`` decompressed bytes from ``stored`` compressed bytes are believed:
    at most ``ratio`` times ``stored``, or ``RATIO_FREE_BYTES``. Applied to each section and to
    all the zstd sections of an archive together, so no archive of N bytes makes a reader
    allocate more than ``ratio * N + RATIO_FREE_BYTES`` bytes for decompressed sections."""
    return declared <= max(ratio * stored, RATIO_FREE_BYTES)


def check_vjp_order(order: int, *, where: str = "the archive") -> None:
    """Checks a VJP order an archive declares, or a VJP chain's length less one, read.

    Raises:
        CorruptArchiveError: over ``MAX_VJP_ORDER`` (a writer refuses it:
            ``UnsupportedFeatureError``).
    """
    if order > MAX_VJP_ORDER:
        raise CorruptArchiveError(
            f"{where} stores VJP orders up to {order}; at most {MAX_VJP_ORDER} are read"
        )
