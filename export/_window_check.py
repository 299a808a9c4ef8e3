"""An archive's place in jax's 6-month window (``jaxport._window``), read from its header.

``inspect`` reports it; ``loads`` and ``loads_model`` apply ``outside_window`` to it right
after the header is checked, before any module is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._window import JaxWindow, check_window, jax_window
from jaxport.export import _fb
from jaxport.schema import fb

if TYPE_CHECKING:
    from jaxport.export._archive import ArchiveHeader

__all__ = ["check_header_window", "header_window"]


def header_window(head: ArchiveHeader) -> JaxWindow:
    """The window of the archive whose checked header is ``head``: its producer's jax release
    (``"unknown"`` when not recorded) and whether any input or output of the function (of any
    method of a model) has a sharding.

    Raises:
        CorruptArchiveError: a malformed FlatBuffer (within ``_fb.translating_read_errors``).
    """
    producer = head.archive.Producer()
    version = (_fb.read_str(producer.JaxVersion()) if producer else "") or "unknown"
    return jax_window(version, sharded=any(map(_sharded, _exported_tables(head))))


def check_header_window(head: ArchiveHeader, policy: str, *, path: str | None) -> None:
    """``loads(..., outside_window=policy)`` for the archive of ``head``.

    Raises:
        OutsideJaxWindowError: ``policy == "refuse"`` and the archive is outside the window.
        ValueError: an unknown policy.
    """
    if policy == "allow":
        return
    with _fb.translating_read_errors(path):
        producer = head.archive.Producer()
        version = (_fb.read_str(producer.JaxVersion()) if producer else "") or "unknown"
    # Whether the function is sharded only changes the message of an archive outside the
    # window: the shardings are scanned for that message alone.
    window = jax_window(version, sharded=False)
    if window.within_window is False:
        with _fb.translating_read_errors(path):
            window = header_window(head)
    check_window(window, policy, path=path)


def _exported_tables(head: ArchiveHeader) -> list[fb.Exported]:
    """The function's Exported table, or each model method's, each once (methods may share
    one: it is scanned once, as the header budget allows)."""
    model = head.archive.Model()
    if model is None:
        table = head.archive.Exported()
        return [table] if table is not None else []
    tables: dict[int, fb.Exported] = {}
    for m in _fb.read_tables(model, "Methods"):
        table = m.Exported()
        if table is not None:
            tables.setdefault(table._tab.Pos, table)
    return list(tables.values())


def _sharded(table: fb.Exported) -> bool:
    """Whether a sharding of the primal's inputs or outputs is specified (named or HLO)."""
    for field in ("Exported.InShardings", "Exported.OutShardings"):
        for position in set(_fb.table_positions(table, field)):
            sharding = _fb.table_at(fb.Sharding, table, position)
            if sharding.Named() is not None or not sharding.HloShardingIsNone():
                return True
    return False
