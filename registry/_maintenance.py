"""Maintenance: delete versions or names, collect unreferenced blobs (``gc``), ``verify``.

``gc`` first purges the versions a retention run soft-deleted whose restore period is over
(``registry/_retention.py``), in the same transaction, so that their blobs are collected too.

``gc`` and pushes share one protocol (``_publish``): gc deletes a blob only inside a write
transaction holding the exclusive blob lock, and only when no variant, no golden examples and no
live ``pending_blobs`` row of a push in flight needs it. A model variant needs its parts
(``variant_parts``: the skeleton and each tensor), which its push registers as pending like any
blob. Stale temporary files of killed writes are collected too, never one whose digest (in its
name) a push in flight has pending, and so are the directories of killed commits
(``registry/_workdirs.py``: those whose process is gone); files that are not jaxport's are
reported and left alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, delete, select

from jaxport import ConflictError, IntegrityError
from jaxport.export._internal import Part
from jaxport.registry import _db
from jaxport.registry._aliases import move_alias
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import FUNCTION, MODEL, joined_archive, parts_of

if TYPE_CHECKING:
    from jaxport.audit import AuditResult
from jaxport.registry._models import (
    AliasRow,
    BlobRow,
    CompiledFileRow,
    CompiledRow,
    ExamplesRow,
    NameRow,
    PendingBlobRow,
    SignatureRow,
    VariantPartRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._publish import PENDING_TTL, pid_scope
from jaxport.registry._queries import model_id_of, version_id_of
from jaxport.registry._retention import expired_versions, purge_expired
from jaxport.registry._types import BlobProblem, GcReport, VerifyReport
from jaxport.registry._workdirs import sweep_commit_dirs

__all__ = ["Maintenance"]


class Maintenance:
    """``delete``, ``gc`` and ``verify`` on one registry (database + blob store)."""

    def __init__(self, engine: Engine, blobs: BlobStore):
        self._engine = engine
        self._blobs = blobs

    def delete(self, name: str, version: int | None, *, force: bool) -> None:
        """See ``Registry.delete``."""
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            model_id = model_id_of(conn, name)
            version_id = 0
            q = select(AliasRow.alias, AliasRow.version).where(AliasRow.model_id == model_id)
            if version is not None:
                version_id = version_id_of(conn, model_id, name, version)
                q = q.where(AliasRow.version == version)
            pointing = sorted(conn.execute(q).all())
            if pointing and not force:
                what = f"{name}:{version}" if version is not None else f"{name}'s versions"
                listed = ", ".join(f"@{a} -> {v}" for a, v in pointing)
                raise ConflictError(
                    f"aliases point at {what} ({listed}): move them first, or delete with "
                    "force=True"
                )
            for alias, _ in pointing:
                move_alias(conn, name, alias, None)
            # A deleted name keeps its row: version numbers are never handed out twice.
            doomed = (
                VersionRow.model_id == model_id if version is None else VersionRow.id == version_id
            )
            conn.execute(delete(VersionRow).where(doomed))

    def gc(self, *, dry_run: bool, min_age: float, temp_age: float) -> GcReport:
        """See ``Registry.gc``."""
        stored = list(self._blobs.digests())
        strays = list(self._blobs.strays())
        with _db.translating_db_errors(), self._transaction(dry_run) as conn:
            _db.blob_lock(conn, exclusive=True)
            now = time.time()  # versions past their restore period go first (``_retention``)
            purged = purge_expired(conn, now, dry_run=dry_run)
            if not dry_run:
                _forget_orphan_signatures(conn)
            needed = referenced(conn, excluding=expired_versions(now) if dry_run else None)
            pending = _live_pending(conn, forget_dead=not dry_run)
            unreferenced = [d for d in stored if d not in needed]
            kept_pending = tuple(d for d in unreferenced if d in pending)
            rest = [d for d in unreferenced if d not in pending]
            ages = {d: self._age(d) for d in rest}
            young = tuple(d for d in rest if ages[d] < min_age)
            doomed = tuple(d for d in rest if ages[d] >= min_age)
            total = sum(self._size(d) for d in doomed)
            if not dry_run:
                for digest in doomed:
                    conn.execute(delete(BlobRow).where(BlobRow.digest == digest))
                    self._blobs.delete(digest)
                _forget_rows_without_files(conn, needed | pending, set(stored))
                conn.execute(
                    delete(PendingBlobRow).where(
                        PendingBlobRow.created_at < time.time() - PENDING_TTL
                    )
                )
        # A temporary file of a push in flight (its digest pending) is never removed: strays
        # are listed before the pending rows are read, and a push registers before it writes.
        temps = tuple(
            s for s in strays if s.kind == "temp" and s.age >= temp_age and s.digest not in pending
        )
        removed = {s.path for s in temps}
        young_temps = tuple(s.path for s in strays if s.kind == "temp" and s.path not in removed)
        if not dry_run:
            for stray in temps:
                self._blobs.remove_stray(stray)
        foreign = tuple(s.path for s in strays if s.kind == "foreign")
        commits = tuple(sweep_commit_dirs(self._blobs, dry_run=dry_run))  # of killed commits: F8
        return GcReport(
            digests=doomed,
            bytes=total,
            dry_run=dry_run,
            kept_young=young,
            kept_pending=kept_pending,
            temp_files=tuple(s.path for s in temps) + commits,
            foreign=foreign,
            kept_temp=young_temps,
            purged=tuple(f"{name}:{version}" for name, version in purged),
        )

    def _read_in_full(
        self, readers: dict[str, Callable[[], bytes]], users: dict[str, set[str]], timeout: float
    ) -> list[BlobProblem]:
        """Each archive read in full (every module parsed, a model's every tensor checked) in
        a worker process, one in memory at a time: the problems."""
        from jaxport.audit import AuditJob, run_audits

        digests = sorted(readers)
        _, results = run_audits([AuditJob(readers[d], None) for d in digests], timeout=timeout)
        return [
            BlobProblem(digest, state, tuple(sorted(users[digest])), r.reason)
            for digest, r in zip(digests, results, strict=True)
            if (state := _deep_state(r))
        ]

    def _model_reader(self, parts: list[Part], size: int) -> Callable[[], bytes]:
        return functools.partial(joined_archive, self._blobs, parts, size)

    @contextlib.contextmanager
    def _transaction(self, dry_run: bool) -> Iterator[Connection]:
        if dry_run:
            with self._engine.connect() as conn:
                yield conn
        else:
            with _db.write_transaction(self._engine) as conn:
                yield conn

    def _age(self, digest: str) -> float:
        try:
            return self._blobs.age(digest)
        except FileNotFoundError:  # deleted meanwhile (another gc)
            return 0.0

    def _size(self, digest: str) -> int:
        try:
            return self._blobs.size(digest)
        except FileNotFoundError:
            return 0

    def verify(self, *, deep: bool, timeout: float) -> VerifyReport:
        """See ``Registry.verify``."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            users = _users(conn)
            archives = set(
                conn.execute(
                    select(VariantRow.digest).where(VariantRow.kind == FUNCTION).distinct()
                ).scalars()
            )
            models = _model_archives(conn) if deep else {}
        problems, intact = [], []
        for digest in sorted(users):
            try:
                read_verified(self._blobs, digest)
            except IntegrityError as e:
                state = "missing" if e.found is None else "corrupt"
                problems.append(BlobProblem(digest, state, tuple(sorted(users[digest]))))
                continue
            if deep and digest in archives:
                intact.append(digest)
        broken = {p.digest for p in problems}
        readers: dict[str, Callable[[], bytes]] = {
            d: functools.partial(read_verified, self._blobs, d) for d in intact
        }
        for digest, (parts, size, names) in models.items():
            if not broken & {part.digest for part in parts}:
                readers[digest] = self._model_reader(parts, size)
                users.setdefault(digest, names)
        if readers:
            problems += self._read_in_full(readers, users, timeout)
        stored = set(self._blobs.digests())
        return VerifyReport(
            checked=len(users),
            missing=tuple(p.digest for p in problems if p.state == "missing"),
            corrupt=tuple(p.digest for p in problems if p.state == "corrupt"),
            unreferenced=tuple(sorted(stored - set(users))),
            problems=tuple(problems),
            invalid=tuple(p.digest for p in problems if p.state == "invalid"),
            deep=deep,
            newer=tuple(p.digest for p in problems if p.state == "newer"),
        )


def _deep_state(result: AuditResult) -> str:
    """A deep read's state: ``invalid``; ``newer`` (well formed, written by a newer jax than
    this one, which cannot parse its modules: ``check_archive``); "" when it reads."""
    if result.status != "ok":
        return "invalid"
    return "newer" if "newer" in result.checks else ""


def referenced(conn: Connection, *, excluding: Any = None) -> set[str]:
    """Every digest a variant, a part of a model variant, a version's golden examples or a
    signature of a variant's archive refers to; ``excluding``: a SELECT of version ids whose
    references do not count (a dry run's versions that gc would purge)."""
    held = select(VariantRow.digest)
    variant_ids = select(VariantRow.id)
    examples_q = select(ExamplesRow.digest)
    if excluding is not None:
        held = held.where(VariantRow.version_id.not_in(excluding))
        variant_ids = variant_ids.where(VariantRow.version_id.not_in(excluding))
        examples_q = examples_q.where(ExamplesRow.version_id.not_in(excluding))
    variants = conn.execute(held.distinct()).scalars()
    parts_q = select(VariantPartRow.digest)
    if excluding is not None:
        parts_q = parts_q.where(VariantPartRow.variant_id.in_(variant_ids))
    parts = conn.execute(parts_q.distinct()).scalars()
    examples = conn.execute(examples_q.distinct()).scalars()
    bundles = conn.execute(
        select(SignatureRow.bundle_digest).where(SignatureRow.digest.in_(held))
    ).scalars()
    return set(variants) | set(parts) | set(examples) | set(bundles) | _compiled(conn, held)


def _compiled(conn: Connection, held: Any) -> set[str]:
    """The manifests, bundles and files of the compiled sets of archives ``held`` holds."""
    sets = select(CompiledRow.id).where(CompiledRow.digest.in_(held))
    rows = conn.execute(
        select(CompiledRow.manifest_digest, CompiledRow.bundle_digest).where(
            CompiledRow.digest.in_(held)
        )
    ).all()
    files = conn.execute(
        select(CompiledFileRow.digest).where(CompiledFileRow.compiled_id.in_(sets))
    ).scalars()
    return {d for row in rows for d in row} | set(files)


def _forget_orphan_signatures(conn: Connection) -> None:
    """Deletes the signature rows of archives no variant holds (their bundles become
    unreferenced blobs, collected as any other). Runs under the exclusive blob lock."""
    conn.execute(delete(SignatureRow).where(SignatureRow.digest.not_in(select(VariantRow.digest))))
    conn.execute(delete(CompiledRow).where(CompiledRow.digest.not_in(select(VariantRow.digest))))


def _forget_rows_without_files(conn: Connection, needed: set[str], stored: set[str]) -> None:
    """Deletes the ``blobs`` rows that nothing needs and that have no file: those of deleted
    model archives (whose bytes are their parts), or of blobs lost before their version was
    deleted. Runs under the exclusive blob lock, so no push commits a row meanwhile."""
    rows = set(conn.execute(select(BlobRow.digest)).scalars())
    doomed = sorted(rows - needed - stored)
    for start in range(0, len(doomed), 500):
        conn.execute(delete(BlobRow).where(BlobRow.digest.in_(doomed[start : start + 500])))


def _live_pending(conn: Connection, *, forget_dead: bool) -> set[str]:
    """Digests of pushes in flight: rows younger than ``PENDING_TTL`` whose process may still
    run (another host's or PID namespace's, or this one's with that pid alive: ``pid_scope``).
    Dead rows are deleted."""
    cutoff = time.time() - PENDING_TTL
    rows = conn.execute(
        select(
            PendingBlobRow.digest, PendingBlobRow.token, PendingBlobRow.host, PendingBlobRow.pid
        ).where(PendingBlobRow.created_at >= cutoff)
    ).all()
    here = pid_scope()
    dead = {r.token for r in rows if r.host == here and not _alive(r.pid)}
    if dead and forget_dead:
        conn.execute(delete(PendingBlobRow).where(PendingBlobRow.token.in_(dead)))
    return {r.digest for r in rows if r.token not in dead}


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _model_archives(conn: Connection) -> dict[str, tuple[list[Part], int, set[str]]]:
    """digest of each model archive -> its parts, its size in bytes and its ``name:version``s."""
    rows = conn.execute(
        select(
            VariantRow.id,
            VariantRow.digest,
            VariantRow.size_bytes,
            NameRow.name,
            VersionRow.version,
        )
        .join(VersionRow, VariantRow.version_id == VersionRow.id)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(VariantRow.kind == MODEL)
    )
    found: dict[str, tuple[list[Part], int, set[str]]] = {}
    for variant_id, digest, size, name, version in rows:
        if digest not in found:
            found[digest] = (parts_of(conn, variant_id), size, set())
        found[digest][2].add(f"{name}:{version}")
    return found


def _users(conn: Connection) -> dict[str, set[str]]:
    """digest -> the ``name:version`` (and ``name:version examples``) that need it: the blob of
    a function archive, the parts of a model archive (whose own digest is no blob)."""
    queries = (
        (
            select(VariantRow.digest, NameRow.name, VersionRow.version)
            .join(VersionRow, VariantRow.version_id == VersionRow.id)
            .where(VariantRow.kind == FUNCTION),
            "",
        ),
        (
            select(VariantPartRow.digest, NameRow.name, VersionRow.version)
            .join(VariantRow, VariantRow.id == VariantPartRow.variant_id)
            .join(VersionRow, VariantRow.version_id == VersionRow.id),
            "",
        ),
        (
            select(ExamplesRow.digest, NameRow.name, VersionRow.version).join(
                VersionRow, ExamplesRow.version_id == VersionRow.id
            ),
            " examples",
        ),
        (
            select(SignatureRow.bundle_digest, NameRow.name, VersionRow.version)
            .join(VariantRow, VariantRow.digest == SignatureRow.digest)
            .join(VersionRow, VariantRow.version_id == VersionRow.id),
            " signature",
        ),
    )
    users: dict[str, set[str]] = defaultdict(set)
    for query, suffix in queries:
        rows = conn.execute(query.join(NameRow, NameRow.id == VersionRow.model_id))
        for digest, name, version in rows:
            users[digest].add(f"{name}:{version}{suffix}")
    return users
