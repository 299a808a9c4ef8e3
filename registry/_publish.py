"""Publishing: ``push`` turns archives, jax-native bytes or ``Exported`` objects into a version.

What is stored:
- a jaxport archive (bytes or a file) is validated in full (every digest, every VJP level) and
  stored **verbatim**: its digest is the file's sha256, ``pull_bytes`` returns the same bytes;
- jax-native ``Exported.serialize()`` bytes (told apart by content) are converted once, with
  every VJP order they carry; the producer's jax is unknown (jax's format does not record it) and
  what the format lost is reported in ``PushResult.notes``;
- an ``Exported`` is written with ``jaxport.dumps(exp, vjp_order=...)``;
- a model archive (bytes or a file) is validated in full (every method, VJP level and tensor
  digest), a ``jaxport.Model`` written with ``Model.dumps()``; either is stored in parts, its
  skeleton and each tensor a blob (``_model_parts``); its digest is the whole archive's sha256.
Push-time metadata belongs to the version; it never rewrites an archive.

The blob protocol, which lets ``gc`` run beside pushes (``_maintenance.gc``):
1. register every digest the push needs in ``pending_blobs`` (under the shared blob lock);
2. write each blob, or check the one already stored (hash it) and write it again if it is
   missing or corrupt (a repair);
3. in one transaction (shared blob lock): insert the version, its variants and blob rows, and
   delete the pending rows. The name's row is locked first, by the upsert that allocates the
   version number, so pushes to one name queue there; a version's ``content_key`` (its variant
   digests and golden examples) is unique per name: a push that finds its content already a
   version (a concurrent push of the same content committed it) gives the number back and
   returns that version.
The push holds one pooled connection from step 1 to step 3 (two transactions: gc must see the
pending rows while the blobs are written, and must be able to run meanwhile); its statements
do not grow with the number of variants or parts (multi-row INSERTs), and the version it
returns is built from the rows it inserted, not read back. Step 1 is one statement (SQLite:
``_INSERT_PENDING``, PostgreSQL: ``_db.register_pending_at_once``); on PostgreSQL step 3 is
four: the blob lock rides on the name's upsert, the blob rows on the version's INSERT, the
platforms, parts, examples and the pending rows' DELETE on the event's INSERT
(``_batch.WriteBatch``). On failure the pending rows are deleted; a killed push's rows are
dropped by gc once its process is gone (rows name the process: ``pid_scope`` and pid), and
expire after ``PENDING_TTL`` seconds where gc cannot tell (another host's). A blob's
temporary file is named after its digest (``_blobs``), so gc never removes one of a push in
flight, whatever its age.
``gc`` deletes a blob only under the exclusive blob lock and only when neither a variant, nor
golden examples, nor a live pending row needs it, so a blob a push relies on is either still
there at commit or written after gc's transaction.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import types
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    delete,
    insert,
    literal_column,
    select,
    update,
)

from jaxport import (
    InvalidNameError,
)
from jaxport._window import release_key
from jaxport.registry import _db
from jaxport.registry._batch import WriteBatch
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._event_log import EventLog
from jaxport.registry._gate_types import refused_after_push
from jaxport.registry._gates import move_checked, push_detail
from jaxport.registry._golden import golden_blob
from jaxport.registry._lineage import LineageInput
from jaxport.registry._lineage_store import lineage_columns
from jaxport.registry._model_parts import FUNCTION, MODEL
from jaxport.registry._models import (
    STABLEHLO_VERSION_CHARS,
    BlobRow,
    ExamplesRow,
    NameRow,
    PendingBlobRow,
    VariantPartRow,
    VariantPlatformRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._names import check_metadata, check_names
from jaxport.registry._push_items import (
    PushItem,
    Source,
    allowed,
    check_distinct,
    check_kinds,
    prepare,
    push_name,
    runner,
)
from jaxport.registry._queries import ref_on
from jaxport.registry._stored_push import check_claimed
from jaxport.registry._types import PushResult, Ref, VariantInfo
from jaxport.registry._verdicts import RegistryVerdicts, push_verdicts

if TYPE_CHECKING:
    from jaxport.export import ArchiveInfo

__all__ = ["PENDING_TTL", "Publisher", "Source", "content_key", "pid_scope"]

#: Seconds after which the pending rows of a push that never finished stop protecting blobs.
PENDING_TTL = 24 * 3600.0
UNKNOWN = "unknown"
#: Metadata key marking an archive converted from jax-native bytes (``export._native``).
CONVERTED_KEY = "jaxport.converted_from"

#: Statements ``_built`` made: (builder, dialect name) -> statement.
_BUILT: dict[tuple[Callable[[Connection], Any], str], Any] = {}
#: A push's variants have distinct digests (``_push_items.check_distinct``): they tell the ids
#: returned apart (SQLite inserts row by row when asked for them in parameter order).
_INSERT_VARIANTS = insert(VariantRow).returning(VariantRow.digest, VariantRow.id)
#: SQLite's pending rows, each returned with whether its digest has a ``blobs`` row already
#: (a correlated subquery in ``RETURNING``: one statement where an INSERT and a SELECT were).
_INSERT_PENDING: Any = insert(PendingBlobRow).returning(
    PendingBlobRow.digest,
    literal_column("EXISTS (SELECT 1 FROM blobs WHERE blobs.digest = pending_blobs.digest)"),
)  # in no particular order (SQLite inserts row by row when asked for parameter order)


class Publisher:
    """``push`` on one registry (database + blob store)."""

    def __init__(self, engine: Engine, blobs: BlobStore, events: EventLog):
        self._engine = engine
        self._blobs = blobs
        self._events = events

    def push(
        self,
        sources: Source | Sequence[Source],
        name: str | None,
        *,
        vjp_order: int,
        aliases: Iterable[str],
        metadata: Mapping[str, str] | None,
        examples: Any,
        max_size: int,
        allow_custom_calls: Sequence[str] = (),
        tolerance: Any = None,
        lineage: LineageInput | None = None,
    ) -> PushResult:
        """See ``Registry.push``; ``lineage``: its source and provenance (``_lineage``)."""
        listed = list(sources) if isinstance(sources, list | tuple) else [sources]
        if not listed:
            raise InvalidNameError("push needs at least one Exported, archive or path")
        meta = check_metadata(metadata)
        alias_names = check_names(aliases, "alias")
        if isinstance(vjp_order, bool) or not isinstance(vjp_order, int) or vjp_order < 0:
            raise InvalidNameError(f"vjp_order must be an int >= 0, got {vjp_order!r:.40}")
        verdicts = RegistryVerdicts(self._engine)
        cache = push_verdicts(verdicts)
        allow = allowed(allow_custom_calls)
        items = [prepare(s, vjp_order, cache, max_size, allow) for s in listed]
        check_kinds(items, examples)
        check_distinct(items, listed)
        name = push_name(name, items[0])
        golden = None
        if tolerance is not None and not examples:
            raise InvalidNameError("a tolerance applies to golden examples: pass examples too")
        if examples:
            golden = self._stored_golden(name, items, examples, tolerance) or golden_blob(
                items[0].kind, examples, lambda: runner(items), tolerance
            )
        blobs = {d: b for i in items for d, b in i.blobs.items()}
        if golden is not None:
            blobs[golden[0]] = golden[1]
        notes = tuple(n for i in items for n in i.notes)
        token = uuid.uuid4().hex
        with _db.translating_db_errors(), _db.write_connection(self._engine) as conn:
            if stored := [i for i in items if i.stored]:  # parts the store vouches for
                with conn.begin():
                    for i in stored:
                        check_claimed(conn, i.digest, i.parts)
            pending = list(dict.fromkeys([*blobs, *(d for i in items for d in i.stored)]))
            known = _register_pending(conn, token, pending)
            try:
                repaired = self._write_blobs(blobs, known)
                with conn.begin():
                    writes = WriteBatch(conn)
                    derived: dict[str, Any] = {}  # the source _commit records, for the event
                    ref, created = _commit(
                        writes, name, items, meta, golden, examples, (lineage, derived)
                    )
                    verdicts.record(conn)
                    # protected aliases whose gates fail are not moved; the push stands
                    gated, refused = move_checked(
                        conn, name, alias_names, ref.version, before_gates=writes.flush
                    )
                    moved = [a for a in alias_names if a not in refused]
                    writes.add(delete(PendingBlobRow).where(PendingBlobRow.token == token))
                    event = None
                    if created or repaired or gated or refused:
                        event = self._events.insert(conn, "push", name, ref.version, {
                            "created": created, "aliases": moved, "repaired": list(repaired),
                            **push_detail(gated, refused),
                            "digests": [v.digest for v in ref.variants],
                            **(derived if created else {}),
                        }, writes=writes)  # fmt: skip
                    writes.flush()
            except BaseException:
                _forget_pending(conn, token)
                raise
        self._events.notify(event)
        if refused:
            raise refused_after_push(name, ref.version, refused.values())
        if not created and ref.metadata != meta and meta:
            notes += ("identical archives are already this version: its metadata is kept",)
        return PushResult(
            ref.name, ref.version, ref.variants, ref.metadata, ref.created_at,
            created=created, notes=notes, repaired=repaired,
        )  # fmt: skip

    def _stored_golden(
        self, name: str, items: Sequence[PushItem], examples: Any, tolerance: Any
    ) -> tuple[str, bytes] | None:
        """The examples blob of a version of ``name`` holding these very archives whose
        examples have these inputs, these given outputs and this tolerance, when an output is
        left for the push to compute: the same archive computed it then, so pushing again
        changes nothing, even where a backend's numerics vary from run to run (GPU
        autotuning, say). None: no such version (the examples are made as usual)."""
        from jaxport.registry._golden import examples_from_blob

        kind = items[0].kind
        calls = [c for cs in examples.values() for c in cs] if kind == MODEL else list(examples)
        if not any(_output_missing(c) for c in calls):
            return None
        query = (
            select(VersionRow.content_key, ExamplesRow.digest)
            .join(NameRow, NameRow.id == VersionRow.model_id)
            .join(ExamplesRow, ExamplesRow.version_id == VersionRow.id)
            .where(NameRow.name == name)
            .order_by(VersionRow.version.desc())
            .limit(_REUSE_LOOKBACK)
        )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        digests = [i.digest for i in items]
        for key, digest in rows:
            if key != content_key(digests, digest) or not self._blobs.exists(digest):
                continue
            data = read_verified(self._blobs, digest)
            if _same_examples(kind, examples_from_blob(kind, data), examples, tolerance):
                return digest, data
        return None

    def _write_blobs(
        self, blobs: Mapping[str, bytes | memoryview], known: set[str]
    ) -> tuple[str, ...]:
        """Writes each blob that is missing or corrupt; returns the digests of those that the
        database already knew (``known``: repairs)."""
        repaired = []
        for digest, data in blobs.items():
            if self._blobs.exists(digest) and _intact(self._blobs, digest):
                continue
            self._blobs.put(digest, data, replace=True)
            if digest in known:
                repaired.append(digest)
        return tuple(repaired)


#: How many of a name's newest versions with examples ``_stored_golden`` looks at.
_REUSE_LOOKBACK = 16


def _output_missing(call: Any) -> bool:
    from jaxport.audit import Example

    return (call.outputs if isinstance(call, Example) else Example(*call).outputs) is None


def _same_examples(kind: str, stored: Any, examples: Any, tolerance: Any) -> bool:
    """Whether ``examples`` (as pushed) are ``stored`` (read back from a blob): the same flat
    inputs, bit for bit, the same outputs where given, the same tolerance override."""
    import jax
    import numpy as np

    from jaxport.audit import Example, check_tolerance

    if check_tolerance(tolerance) != stored.tolerance:
        return False
    if kind == MODEL:
        if set(examples) != set(stored):
            return False
        pairs = [(c, s) for m in examples for c, s in zip(examples[m], stored[m], strict=False)]
        counts = all(len(examples[m]) == len(stored[m]) for m in examples)
    else:
        pairs, counts = list(zip(examples, stored, strict=False)), len(examples) == len(stored)
    if not counts:
        return False

    def same(a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(
            np.asarray(x).dtype == np.asarray(y).dtype
            and np.asarray(x).shape == np.asarray(y).shape
            and np.asarray(x).tobytes() == np.asarray(y).tobytes()
            for x, y in zip(a, b, strict=True)
        )

    for call, old in pairs:
        ex = call if isinstance(call, Example) else Example(*call)
        if not same(jax.tree.leaves((tuple(ex.args), dict(ex.kwargs))), list(old.args)):
            return False
        if ex.outputs is not None and not same(jax.tree.leaves(ex.outputs), list(old.outputs)):
            return False
    return True


def _register_pending(conn: Connection, token: str, blobs: Sequence[str]) -> set[str]:
    """Step 1 of the blob protocol, in a transaction of its own (committed, so gc sees it);
    returns the digests that already have a ``blobs`` row. One statement: on PostgreSQL
    ``_db.register_pending_at_once``, on SQLite ``_INSERT_PENDING``."""
    now, host, pid = time.time(), pid_scope(), os.getpid()
    if conn.dialect.name == "postgresql":
        return _db.register_pending_at_once(
            conn, list(blobs), token=token, host=host, pid=pid, now=now
        )
    rows = [
        {"digest": d, "token": token, "host": host, "pid": pid, "created_at": now} for d in blobs
    ]
    with conn.begin():  # SQLite's write transactions exclude gc's: no blob lock to take
        return {d for d, stored in conn.execute(_INSERT_PENDING, rows) if stored}


def _forget_pending(conn: Connection, token: str) -> None:
    try:
        with conn.begin():
            conn.execute(delete(PendingBlobRow).where(PendingBlobRow.token == token))
    except Exception:  # the rows expire after PENDING_TTL; the push's own error matters
        pass


def _commit(
    writes: WriteBatch,
    name: str,
    items: Sequence[PushItem],
    meta: dict[str, str],
    golden: tuple[str, bytes] | None,
    examples: Sequence[Any] | None,
    lineage: tuple[LineageInput | None, dict[str, Any]] | None = None,
) -> tuple[Ref, bool]:
    """Step 3, in the transaction of ``writes``' connection: the version of this content (made
    now, or already there) and whether it was made. Its first statement takes the shared blob
    lock (``_name_upsert``); the blob rows ride on the version's INSERT, the platform, part and
    examples rows on a later statement (``WriteBatch``)."""
    conn = writes.connection
    key = content_key([i.digest for i in items], golden[0] if golden else None)
    now = time.time()
    model_id, version = _next_version(conn, name, now)  # the name's row stays locked
    metadata_json = json.dumps(meta, sort_keys=True)
    row = {"model_id": model_id, "version": version, "created_at": now,
           "metadata_json": metadata_json, "content_key": key}  # fmt: skip
    digests = [i.digest for i in items]
    source, derived = lineage or (None, {})  # derived: filled with the source, for the event
    row |= lineage_columns(conn, (model_id, name), digests, golden is not None, source, derived)
    # A model archive's own digest gets a row too (the variants' foreign key), no file. Where
    # the content is a version already, its blobs have rows: the INSERT does nothing.
    sizes = {i.digest: i.size for i in items}
    sizes |= {p.digest: p.size for i in items for p in i.parts}
    if golden is not None:
        sizes[golden[0]] = len(golden[1])
    # In digest order: pushes sharing blobs lock their rows in one order (no deadlock).
    blob_rows = [{"digest": d, "size": n, "created_at": now} for d, n in sorted(sizes.items())]
    writes.insert(BlobRow.__table__, blob_rows, skip_existing=["digest"])
    version_id = writes.execute(_built(conn, _version_insert), row).scalar_one_or_none()
    if version_id is None:  # this content is a version already: give the number back
        existing = _version_with(conn, model_id, key)
        if existing is None:  # deleted since the insert looked: there is none now
            version_id = conn.execute(_built(conn, _version_insert), row).scalar_one()
        else:
            back = update(NameRow).where(NameRow.id == model_id)
            conn.execute(back.values(last_version=NameRow.last_version - 1))
            return ref_on(conn, name, existing), False
    variants = _insert_variants(writes, name, version, (model_id, version_id), items, now)
    if golden is not None:
        examples_row = {"version_id": version_id, "digest": golden[0], "count": len(examples or ())}
        writes.insert(ExamplesRow.__table__, [examples_row])
    return Ref(name, version, variants, json.loads(metadata_json), now), True


def content_key(digests: Sequence[str], examples: str | None) -> str:
    """What makes two versions of one name the same: the sha256 (hex) of their variants'
    digests, in order, and their golden examples' digest (None: none). Metadata and aliases
    are not part of it (the first push's metadata is kept)."""
    text = json.dumps({"variants": list(digests), "examples": examples}, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def pid_scope() -> str:
    """Where a pid names one process, for ``pending_blobs.host``: the host name and, on Linux,
    the kernel's boot id and PID namespace. Containers that share a host name (Kubernetes pods
    with ``hostNetwork``, ``docker run --uts=host``) number their processes apart, so a pid
    seen from another namespace says nothing (tests/reliability/test_pending_rows.py). At most
    255 characters; the host name alone where ``/proc`` does not tell.
    """
    host = socket.gethostname()[:200]
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, UnicodeDecodeError):
        return host
    return f"{host}/{boot[:36]}/pid:{namespace}"


def _intact(blobs: BlobStore, digest: str) -> bool:
    try:
        return hashlib.sha256(blobs.get(digest)).hexdigest() == digest
    except FileNotFoundError:
        return False


# -- rows ---------------------------------------------------------------------------------


def _next_version(conn: Connection, name: str, now: float) -> tuple[int, int]:
    """Allocates the next version number of ``name`` (its ``models`` row made if need be),
    in one upsert whose row lock queues concurrent pushes to the name until commit:
    ``(model id, version)``."""
    row = {"name": name, "last_version": 1, "created_at": now}
    model_id, version = conn.execute(_built(conn, _name_upsert), row).one()
    return int(model_id), int(version)


def _built(conn: Connection, build: Callable[[Connection], Any]) -> Any:
    """``build(conn)``, made once per dialect: building a statement costs more than a push's
    run of it."""
    key = (build, conn.dialect.name)
    if key not in _BUILT:
        _BUILT[key] = build(conn)
    return _BUILT[key]


def _name_upsert(conn: Connection) -> Any:
    """The upsert of the name's row that allocates a version number; on PostgreSQL it takes
    the shared blob lock first, in the same statement (its row comes from the lock's SELECT).
    SQLite's write transactions exclude gc's already."""
    upsert = _db.insert_on_conflict(conn, NameRow.__table__)
    if conn.dialect.name == "postgresql":
        columns = ["name", "last_version", "created_at"]
        values = [bindparam(c, type_=NameRow.__table__.c[c].type) for c in columns]
        lock = _db.shared_blob_lock().cte("blob_lock")
        upsert = upsert.from_select(columns, select(*values).select_from(lock))
    upsert = upsert.on_conflict_do_update(
        index_elements=["name"], set_={"last_version": NameRow.last_version + 1}
    )
    return upsert.returning(NameRow.id, NameRow.last_version)


def _version_insert(conn: Connection) -> Any:
    """The INSERT of a ``versions`` row that returns its id, or nothing where the name has a
    version of that content already (its unique ``content_key``): one statement for a new
    version, no look-up before it."""
    statement = _db.insert_on_conflict(conn, VersionRow.__table__)
    statement = statement.on_conflict_do_nothing(index_elements=["content_key", "model_id"])
    return statement.returning(VersionRow.id)


def _version_with(conn: Connection, model_id: int, key: str) -> int | None:
    """The version of the name whose ``content_key`` is ``key``; its row is locked
    (PostgreSQL), so a concurrent delete waits for this push to commit."""
    found = conn.execute(
        select(VersionRow.version)
        .where(VersionRow.model_id == model_id, VersionRow.content_key == key)
        .with_for_update()
    ).scalar_one_or_none()
    return None if found is None else int(found)


def _insert_variants(
    writes: WriteBatch,
    name: str,
    version: int,
    row_ids: tuple[int, int],
    items: Sequence[PushItem],
    now: float,
) -> tuple[VariantInfo, ...]:
    """Inserts the variants in one statement, their platforms and parts added to ``writes``,
    and returns them as a read would."""
    model_id, version_id = row_ids  # the name's and the version's
    rows = [variant_row(model_id, version_id, i.digest, i.size, i.info, now) for i in items]
    inserted = writes.execute(_INSERT_VARIANTS, rows)
    id_of = {r.digest: r.id for r in inserted}
    ids = [id_of[i.digest] for i in items]
    platforms = [
        {"variant_id": variant_id, "platform": p}
        for variant_id, item in zip(ids, items, strict=True)
        for p in dict.fromkeys(item.info.platforms)
    ]
    writes.insert(VariantPlatformRow.__table__, platforms)
    parts = [
        {"variant_id": variant_id, "position": p.position, "digest": p.digest,
         "offset": p.offset, "size": p.size}
        for variant_id, item in zip(ids, items, strict=True)
        for p in item.parts
    ]  # fmt: skip
    writes.insert(VariantPartRow.__table__, parts)
    return tuple(
        VariantInfo.from_row(name, version, types.SimpleNamespace(**row, id=variant_id))
        for variant_id, row in zip(ids, rows, strict=True)
    )


def variant_row(
    model_id: int, version_id: int, digest: str, size: int, info: ArchiveInfo, now: float
) -> dict[str, Any]:
    """The ``variants`` row of an archive (``metadata_json``: the archive's own metadata); a
    model's ``sharded`` and ``shape_polymorphic`` cover every method's signature."""
    avals = (*info.in_avals, *info.out_avals)
    avals += tuple(a for m in info.methods for a in (*m.in_avals, *m.out_avals))
    converted = info.metadata.get(CONVERTED_KEY) == "jax-native"
    return {
        "model_id": model_id,
        "version_id": version_id,
        "digest": digest,
        "fun_name": info.fun_name,
        "platforms": ",".join(info.platforms),
        "nr_devices": info.nr_devices,
        "sharded": any(a.sharding is not None for a in avals),
        "calling_convention_version": info.calling_convention_version,
        "format_version": info.format_version,
        "jax_version": UNKNOWN if converted else info.jax_version,
        "jaxlib_version": UNKNOWN if converted else info.jaxlib_version,
        "vjp_order": info.vjp_order,
        "shape_polymorphic": any(isinstance(d, str) for a in avals for d in a.shape),
        "custom_call_targets": json.dumps(list(info.custom_call_targets)),
        "size_bytes": size,
        "in_signature": _signature(info.in_avals),
        "out_signature": _signature(info.out_avals),
        "created_at": now,
        "metadata_json": json.dumps(info.metadata, sort_keys=True),
        "kind": MODEL if info.kind == MODEL else FUNCTION,
        "stablehlo_version": newest_stablehlo(info),
    }


def newest_stablehlo(info: ArchiveInfo) -> str | None:
    """The newest StableHLO version any module of ``info`` declares (None: none does, or the
    newest is longer than the ``variants.stablehlo_version`` column holds)."""
    versions = [m.stablehlo_version for m in info.modules if m.stablehlo_version]
    newest = max(versions, key=release_key, default=None)
    return newest if newest is not None and len(newest) <= STABLEHLO_VERSION_CHARS else None


def _signature(avals: Any) -> str:
    return "; ".join(f"{a.path or '.'}: {a.dtype}[{', '.join(map(str, a.shape))}]" for a in avals)
