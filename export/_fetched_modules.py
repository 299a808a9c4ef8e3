"""A function archive read a module at a time: the registry server answers one module of an
archive it stores (``module_of``), and a client builds the ``Exported`` from the archive's
header alone, each module fetched when it is first read (``exported_from_header``): the primal
now, each VJP when ``.vjp()`` first asks.

jaxport's writers put every module of a function archive (the primal, then the VJP of each
order) in one zstd section (schema/FORMAT.md, "Modules"; version 1), compressed together with
long-distance matching, or (version 4) each in a section of its own whose frame refers to the
module before it, so a module's bytes cannot be taken from the stored bytes alone: the
server reads the section (its sha256 checked before any byte is used, its declared size
bounded by the compression ratio, as ``jaxport.loads`` does), decompresses up to the module's
end (version 4: with the module before it, read the same way first) and answers the
module's bytes with their sha256. The client checks the header against the
digest in its fixed prefix, each module's length against the header and its bytes against the
sha256 the server sent, then vets it (custom calls, the sandbox, ``main``'s signature) as a
local read does (``_archive.checked_module_reader``). Nothing of the format changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from jaxport import CorruptArchiveError, IntegrityError, NotFoundError, WrongKindError
from jaxport.export import _container, _fb, _level_sections, _modules, _vetting
from jaxport.export._archive import checked_module_reader, exported_tables, writer_jax
from jaxport.export._exported import decode_exported
from jaxport.export._window_check import check_header_window
from jaxport.schema import fb

if TYPE_CHECKING:
    from jax.export import Exported

__all__ = [
    "FetchModule",
    "ReadRange",
    "exported_from_header",
    "module_lengths",
    "module_of",
    "read_prefix",
]

#: ``read_range(start, end)``: bytes ``[start, end)`` of the archive.
ReadRange = Callable[[int, int], "bytes | memoryview"]
#: ``fetch(index, length)``: module ``index``'s bytes (0 the primal, k the VJP of order k;
#: ``length`` of them, as the header says) and the sha256 (hex) its sender says they have.
FetchModule = Callable[[int, int], tuple[bytes, str]]


def read_prefix(read_range: ReadRange, total: int) -> bytes:
    """The archive's preamble and FlatBuffer header (two ranges), the header checked against
    the digest in the preamble.

    Raises:
        CorruptArchiveError, IntegrityError, UnsupportedVersionError: as ``jaxport.loads``.
    """
    start = bytes(read_range(0, min(total, _container.PREAMBLE_LENGTH)))
    preamble = _container.decode_preamble(start, path=None)
    end = min(total, _container.PREAMBLE_LENGTH + preamble.header_length)
    prefix = start + bytes(read_range(len(start), end)) if end > len(start) else start
    _container.read_header(prefix, total, path=None)
    return prefix


def _function_table(head: _container.ArchiveHeader, where: str | None) -> fb.Exported:
    with _fb.translating_read_errors(where):
        if head.archive.Model() is not None:
            raise WrongKindError(
                f"{where or 'the archive'} is a model archive, not a function archive",
                found="model",
            )
        table: fb.Exported | None = head.archive.Exported()
    if table is None:
        raise CorruptArchiveError("the archive holds no Exported", path=where)
    return table


def _refs(table: fb.Exported, where: str | None) -> list[_modules.ModuleRef]:
    """Each level's module reference, the primal's first. Raises: CorruptArchiveError."""
    refs = []
    with _fb.translating_read_errors(where):
        for t in exported_tables(table):
            module = t.Module()
            if module is None:
                raise CorruptArchiveError("an Exported without its module", path=where)
            refs.append(_modules.decode_module(module))
    return refs


def module_lengths(prefix: bytes | memoryview, total: int) -> list[int]:
    """The length in bytes of each module of a function archive of ``total`` bytes (the
    primal's first), from its preamble and header (``read_prefix``).

    Raises:
        WrongKindError: a model archive.
        CorruptArchiveError, IntegrityError, UnsupportedVersionError: as ``jaxport.loads``.
    """
    head = _container.read_header(prefix, total, path=None)
    return [ref.length for ref in _refs(_function_table(head, None), None)]


def module_of(
    read_range: ReadRange,
    total: int,
    index: int,
    *,
    where: str | None = None,
    max_compression_ratio: float = _container.MAX_COMPRESSION_RATIO,
    hold: Callable[[int], contextlib.AbstractContextManager[Any]] | None = None,
) -> tuple[bytes, str]:
    """Module ``index`` (0: the primal, k: the VJP of order k) of the function archive of
    ``total`` bytes read by ``read_range``, and its sha256 (hex): the header read and checked,
    then the module's section read whole and checked against its digest before it is
    decompressed up to the module's end; in a version-4 archive the levels before it first,
    each once, from the nearest one whose section needs no prefix (the primal, or a raw one),
    in a loop. ``hold(nbytes)``: a context held while a section's stored bytes, its module's
    and the module before it are in memory (a server's memory budget).

    Raises:
        WrongKindError: a model archive.
        NotFoundError: no module ``index`` (the message says how many there are).
        IntegrityError: the header or the section does not match its digest.
        CorruptArchiveError, UnsupportedVersionError: a malformed archive (``jaxport.loads``).
    """
    prefix = read_prefix(read_range, total)
    head = _container.read_header(prefix, total, path=where)
    refs = _refs(_function_table(head, where), where)
    if not 0 <= index < len(refs):
        raise NotFoundError(
            f"{where or 'the archive'} holds modules 0 to {len(refs) - 1} (the primal and "
            f"{len(refs) - 1} VJP order(s)), not {index}"
        )
    first = index
    if head.chained and _needs_prefix(head, refs, index):
        # version 4: the level's frame refers to the module before it, read (and checked)
        # first, from the nearest level that needs none, in a loop over the header read once
        _level_sections.check_level_sections(refs, head.sections)
        while _needs_prefix(head, refs, first):
            first -= 1
    previous: bytes | None = None
    for order in range(first, index + 1):
        data, sha256 = _level_module(
            read_range, head, refs, order, previous, where, max_compression_ratio, hold
        )
        previous = data
    return data, sha256


def _needs_prefix(
    head: _container.ArchiveHeader, refs: list[_modules.ModuleRef], index: int
) -> bool:
    """Module ``index`` of a version-4 archive is a zstd frame against the module before it."""
    ref = refs[index]
    return (
        index > 0
        and ref.section < len(head.sections)
        and head.sections[ref.section].compression != fb.Compression.none
    )


def _level_module(
    read_range: ReadRange,
    head: _container.ArchiveHeader,
    refs: list[_modules.ModuleRef],
    index: int,
    previous: bytes | None,
    where: str | None,
    max_compression_ratio: float,
    hold: Callable[[int], contextlib.AbstractContextManager[Any]] | None,
) -> tuple[bytes, str]:
    """Module ``index`` and its sha256 (hex), its section read and checked alone, its frame
    decompressed against ``previous`` (the module before it) where given; ``hold`` covers the
    section's stored bytes, the module's and ``previous``. Raises: as ``module_of``."""
    ref = refs[index]
    if ref.section >= len(head.sections):
        raise CorruptArchiveError(f"module {index} refers to a section that does not exist")
    section = head.sections[ref.section]
    start = head.payload_start + section.offset
    held = section.length + ref.length + len(previous or b"")
    with hold(held) if hold else contextlib.nullcontext():
        stored = memoryview(read_range(start, start + section.length)).cast("B")
        if len(stored) != section.length:
            raise CorruptArchiveError(f"section {ref.section} is cut short", offset=start)
        reader = _container.SectionReader(
            stored, [dataclasses.replace(section, offset=0)], payload_start=start, path=where,
            max_compression_ratio=max_compression_ratio,
        )  # fmt: skip
        if previous is None:
            return reader.read_hashed(0, ref.offset, ref.length)
        data = reader.read(0, ref.offset, ref.length, prefix=previous)
        return data, hashlib.sha256(data).hexdigest()


class _FetchedSections:
    """What ``checked_module_reader`` needs of a ``SectionReader`` (``check``, ``read``,
    ``read_hashed``), each module fetched by its index the first time it is read and checked
    against its length in the header and the sha256 its sender gave."""

    def __init__(
        self, head: _container.ArchiveHeader, refs: list[_modules.ModuleRef],
        fetch: FetchModule, where: str | None,
    ) -> None:  # fmt: skip
        self._sections = head.sections
        self._index = {
            (r.section, r.offset, r.length): i for i, r in reversed(list(enumerate(refs)))
        }
        self._fetch, self._where = fetch, where

    def check(self, index: int, offset: int, length: int) -> None:
        if not 0 <= index < len(self._sections):
            raise CorruptArchiveError(
                f"module refers to section {index}, which does not exist", path=self._where
            )
        size = self._sections[index].uncompressed_length
        if offset + length > size:
            raise CorruptArchiveError(
                f"range [{offset}, {offset + length}) outside section {index} of {size} bytes",
                path=self._where,
            )

    def read(self, index: int, offset: int, length: int, *, prefix: bytes | None = None) -> bytes:
        return self.read_hashed(index, offset, length)[0]

    def read_hashed(
        self, index: int, offset: int, length: int, *, prefix: bytes | None = None
    ) -> tuple[bytes, str]:
        """Module bytes as their sender decompressed them (``prefix``, the module before a
        version-4 level, is the sender's business)."""
        self.check(index, offset, length)
        order = self._index.get((index, offset, length))
        if order is None:  # decode_exported reads only the header's references
            raise CorruptArchiveError("a module range the header does not name", path=self._where)
        data, said = self._fetch(order, length)
        found = hashlib.sha256(data).hexdigest()
        if len(data) != length or found != said:
            raise IntegrityError(
                f"module {order} of {self._where or 'the archive'}: the {len(data):,} bytes "
                f"received are not the {length:,} bytes of sha256 {said} sent",
                expected=said,
                found=found,
            )
        return data, found


def exported_from_header(
    prefix: bytes | memoryview,
    total: int,
    fetch: FetchModule,
    *,
    allow_custom_calls: tuple[str, ...] = (),
    where: str | None = None,
    outside_window: str = "warn",
) -> Exported:
    """The ``Exported`` of a function archive of ``total`` bytes from its preamble and header
    (``prefix``, see ``read_prefix``), its modules read with ``fetch``: the primal's now, each
    VJP's when ``.vjp()`` first asks. Each is checked (length, sha256) and vetted as
    ``jaxport.loads`` vets it.

    Raises:
        WrongKindError: a model archive.
        IntegrityError: the header, or a module, does not match its digest.
        CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
            UnsafeArchiveError, UnsafeModuleError, OutsideJaxWindowError: as ``jaxport.loads``.
    """
    policy = _vetting.module_policy(allow_custom_calls, trusted=False, verdicts=None)
    head = _container.read_header(prefix, total, path=where)
    check_header_window(head, outside_window, path=where)
    policy = dataclasses.replace(policy, writer_jax=writer_jax(head))
    table = _function_table(head, where)
    sections = _FetchedSections(head, _refs(table, where), fetch, where)
    reader = cast("_container.SectionReader", sections)  # the three methods it reads
    with _fb.translating_read_errors(where):
        read_module = checked_module_reader(reader, table, policy, where)
        exported: Any = decode_exported(
            table,
            read_module,
            vjp_order=head.archive.VjpOrder(),
            check_module=lambda ref: sections.check(ref.section, ref.offset, ref.length),
            lazy_vjps=True,
            path=where,
        )
    return cast("Exported", exported)
