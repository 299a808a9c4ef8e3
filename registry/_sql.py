"""``SqlBackend``: a registry in a SQLAlchemy database (SQLite, PostgreSQL) and a blob store,
in this process (``registry/_backend.py`` states the contract).

Each operation is one short delegation to the module that holds its concept: ``_publish``
(push), ``_queries`` (resolve, get, list, search), ``_aliases``, ``_maintenance`` (delete, gc,
verify), ``_findings`` (audits and their stored results), ``_pulls`` (reading variants),
``_signatures``, ``_queue`` (the audit queue, on PostgreSQL), ``_uploads`` (pushes in parts),
``_retention`` (policies, runs, restore).
What the registry server needs beyond the contract (``reach``, ``names_holding``, the event
listeners, ``tokens.authenticate``) is reached through ``jaxport.registry._internal``.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jaxport import SchemaVersionError, __version__
from jaxport.migrations import HEAD
from jaxport.registry import _db, _queue, _uploads, _workdirs
from jaxport.registry._aliases import Aliases
from jaxport.registry._backend import Backend, PushOptions, Rules
from jaxport.registry._blobs import BlobStore, open_blob_store
from jaxport.registry._config import (
    RegistryConfig,
    check_sqlite_directory,
    default_home,
    safe_url,
    sqlite_file,
)
from jaxport.registry._event_log import EventLog
from jaxport.registry._events import Event
from jaxport.registry._findings import Findings
from jaxport.registry._gate_types import AliasGates, GateCheck
from jaxport.registry._gates import Gates
from jaxport.registry._lineage import Lineage
from jaxport.registry._lineage_store import lineage_of
from jaxport.registry._maintenance import Maintenance
from jaxport.registry._publish import Publisher
from jaxport.registry._pulls import Pulls
from jaxport.registry._queries import Queries
from jaxport.registry._queue import QueuedJob
from jaxport.registry._reach import Reach
from jaxport.registry._retention import Retention, record_purges
from jaxport.registry._retention_types import RetentionPlan, RetentionPolicy
from jaxport.registry._signature_store import Signatures
from jaxport.registry._signatures import Signature, SignatureCheck
from jaxport.registry._streams import BlobStream
from jaxport.registry._token_store import Tokens
from jaxport.registry._types import (
    AliasMove,
    GcReport,
    PushResult,
    Ref,
    Resolution,
    VariantInfo,
    VerifyReport,
)
from jaxport.registry._uploads import ArchiveParts

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport._signing import Trusted
    from jaxport.audit import Change, Finding, UpgradeRow
    from jaxport.export import Model
    from jaxport.registry._watch_types import VariantForecast, WatchReport

__all__ = ["SqlBackend"]


class SqlBackend(Backend):
    """The database at ``url`` and the blob store at ``blobs`` (see ``Registry``'s Args).

    Raises:
        SchemaVersionError: the database's schema is older and ``upgrade`` is False.
        RegistryError: the database cannot be reached, a bad URL, no blob store for a server
            database, a missing fsspec package, bad storage options.
    """

    kind = "a SQL registry"
    instead = "this needs a registry server"

    def __init__(
        self,
        url: str | None,
        blobs: str | os.PathLike[str] | BlobStore | None,
        storage_options: Mapping[str, object] | None,
        upgrade: bool,
    ) -> None:
        config = RegistryConfig.from_env()
        url = url or config.database_url()
        _open_sqlite_directory(url, config)
        self.url = safe_url(url)  # the real URL stays in the engine
        location = blobs if blobs is not None else config.blob_location(url)
        if storage_options is None:
            storage_options = config.storage_options(location)
        self.blobs: BlobStore = open_blob_store(location, storage_options)
        self.engine = _db.create_registry_engine(url)
        try:
            with _db.translating_db_errors():
                self._writable = _db.ensure_schema(self.engine, upgrade_db=upgrade)
        except BaseException:
            self.engine.dispose()
            raise
        self.queries = Queries(self.engine)
        self.event_log = EventLog(self.engine)
        self._aliases = Aliases(self.engine, self.event_log)
        self._gates = Gates(self.engine, self.event_log)
        self._publisher = Publisher(self.engine, self.blobs, self.event_log)
        self._pulls = Pulls(self.engine, self.blobs, self.queries)
        self._maintenance = Maintenance(self.engine, self.blobs)
        self._retention = Retention(self.engine, self.event_log)
        self._findings = Findings(self.engine, self.blobs, self.queries, self._pulls)
        self._signatures = Signatures(self.engine, self.blobs, self.queries)
        self.tokens: Tokens = Tokens(self.engine, self.event_log)
        #: What the server's prefix-limited tokens reach beyond their names (``_reach``).
        self.reach = Reach(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def check_writable(self) -> None:
        if self._writable:
            return
        with _db.translating_db_errors(), self.engine.connect() as conn:
            writer = _db.schema_writer(conn)
            revision = _db.current_revision(conn)
        use = f"jaxport {writer} or newer" if writer else "a newer jaxport"
        raise SchemaVersionError(
            f"the registry database is at schema revision {revision}, which this jaxport "
            f"({__version__}, revision {HEAD}) does not know: use {use} to write to it "
            "(reading works)",
            found=revision,
            expected=HEAD,
        )

    # -- metadata reads ----------------------------------------------------------------------

    def names(self) -> builtins.list[str]:
        return self.queries.names()

    def get(self, reference: str) -> Ref:
        ref = self.queries.get(reference)
        return dataclasses.replace(ref, variants=tuple(map(self._pulls.described, ref.variants)))

    def list(
        self, name: str | None, limit: int, after: tuple[str, int] | None
    ) -> builtins.list[Ref]:
        return self.queries.page(name, limit=limit, after=after)

    def search(
        self, filters: Mapping[str, Any], limit: int, after: int | None
    ) -> builtins.list[VariantInfo]:
        return self.queries.search(dict(filters), limit=limit, after=after)

    def resolve(self, reference: str, platform: str | None, nr_devices: int | None) -> Resolution:
        return self.queries.resolve(reference, platform, nr_devices)

    def aliases(self, name: str) -> dict[str, int]:
        return self._aliases.of(name)

    def alias_history(self, name: str, alias: str | None) -> builtins.list[AliasMove]:
        return self._aliases.history(name, alias)

    def events(self, name: str | None, limit: int, before: int | None) -> builtins.list[Event]:
        return self.event_log.list(name=name, limit=limit, before=before)

    def lineage(self, reference: str, depth: int | None) -> Lineage:
        return lineage_of(self.engine, self.queries, reference, depth)

    def audit_results(
        self, name: str | None, jax_version: str | None, platform: str | None, limit: int
    ) -> builtins.list[Finding]:
        return self._findings.results(
            name=name, jax_version=jax_version, platform=platform, limit=limit
        )

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        return self._findings.diff(a, b)

    def signatures(self, reference: str) -> builtins.list[Signature]:
        return self._signatures.of(self.queries.get(reference))

    # -- blob reads --------------------------------------------------------------------------

    def read_blob(self, digest: str) -> bytes:
        return self._pulls.blob(digest)

    def read_range(self, digest: str) -> Callable[[int, int], bytes]:
        stream = self.blob_stream(digest)
        return lambda start, end: b"".join(stream.chunks(start, end))

    def archive(self, reference: str, chosen: VariantInfo) -> bytes:
        return self._pulls.archive_bytes(reference, chosen)

    def write_file(self, reference: str, chosen: VariantInfo, path: str | os.PathLike[str]) -> None:
        self._pulls.write_file(reference, chosen, path)

    def function(
        self, reference: str, chosen: VariantInfo, allow_custom_calls: Sequence[str]
    ) -> Exported:
        return self._pulls.function(reference, chosen, allow_custom_calls)

    def model(self, chosen: VariantInfo, allow_custom_calls: Sequence[str]) -> Model:
        return self._pulls.model(chosen, allow_custom_calls)

    def blob_stream(self, digest: str) -> BlobStream:
        return self._pulls.stream(digest)

    # -- writes ------------------------------------------------------------------------------

    def push(
        self, sources: builtins.list[Any], name: str | None, options: PushOptions
    ) -> PushResult:
        return self._publisher.push(sources, name, **options)

    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        return _uploads.missing(self.blobs, digests)

    def receive_blob(self, digest: str, chunks: Iterable[bytes], max_size: int) -> int:
        return _uploads.receive(self.blobs, digest, chunks, max_size)

    def push_parts(
        self, archives: Sequence[ArchiveParts], push: Callable[[builtins.list[Any]], PushResult]
    ) -> PushResult:
        for archive in archives:
            _uploads.plan_parts(self.blobs, archive)  # its layout, before a byte is written
        with _workdirs.commit_dir(self.blobs) as tmp:  # where gc and a server's start sweep
            # assembled files, or models whose tensors the store vouches for (_stored_push)
            return push(_uploads.sources(self.blobs, archives, tmp))

    def alias(
        self, name: str, alias: str, version: int | None, override: str | None = None
    ) -> None:
        self._aliases.set(name, alias, version, override)

    def protect(self, name: str, alias: str, spec: Mapping[str, Any]) -> AliasGates:
        return self._gates.protect(name, alias, dict(spec))

    def unprotect(self, name: str, alias: str) -> None:
        self._gates.unprotect(name, alias)

    def gates(self, name: str) -> builtins.list[GateCheck]:
        return self._gates.of(name)

    def check_gates(self, name: str, alias: str, version: int) -> GateCheck | None:
        return self._gates.check(name, alias, version)

    def delete(self, name: str, version: int | None, force: bool) -> None:
        self._maintenance.delete(name, version, force=force)
        self.event_log.record("delete", name, version, {"force": force})

    def gc(self, dry_run: bool, min_age: float, temp_age: float) -> GcReport:
        report = self._maintenance.gc(dry_run=dry_run, min_age=min_age, temp_age=temp_age)
        if not dry_run:
            record_purges(self.engine, self.event_log, report.purged)
            self.event_log.record(
                "gc", detail={"removed": len(report.digests), "bytes": report.bytes,
                              "temp_files": len(report.temp_files)},
            )  # fmt: skip
        return report

    def verify(self, deep: bool, timeout: float) -> VerifyReport:
        return self._maintenance.verify(deep=deep, timeout=timeout)

    def retention_policies(self) -> builtins.list[RetentionPolicy]:
        return self._retention.policies()

    def set_retention_policy(self, policy: RetentionPolicy) -> RetentionPolicy:
        return self._retention.set_policy(policy)

    def remove_retention_policy(self, prefix: str) -> RetentionPolicy:
        return self._retention.remove_policy(prefix)

    def retain(self, prefix: str | None, dry_run: bool) -> RetentionPlan:
        return self._retention.retain(prefix, dry_run=dry_run)

    def restore(self, name: str, version: int) -> Ref:
        return self._retention.restore(name, version)

    def audit(
        self,
        reference: str | None,
        platform: str | None,
        store: bool,
        python: str | os.PathLike[str] | None,
        options: Mapping[str, Any],
    ) -> builtins.list[Finding]:
        options = dict(options)
        release = options.pop("jax")
        if release is not None:
            from jaxport.audit import jax_environment

            python = jax_environment(release, default_home())
        return self._findings.audit(
            reference, platform=platform, store=store, python=python, **options
        )

    # -- signatures --------------------------------------------------------------------------

    def sign(self, reference: str, key: Mapping[str, Any]) -> builtins.list[Signature]:
        signed = self._signatures.sign(reference, **key)
        ref = self.queries.get(reference)
        self.event_log.record(
            "sign", ref.name, ref.version, {"signers": sorted({s.signer for s in signed})}
        )
        return signed

    def check_signed(self, variant: VariantInfo, rules: Rules) -> builtins.list[str]:
        return self._signatures.check_variant(variant, rules)

    def verify_signatures(
        self, reference: str, keys: Sequence[Trusted]
    ) -> builtins.list[SignatureCheck]:
        return self._signatures.verify(self.queries.get(reference), keys)

    def adopt_signature(
        self, name: str, digest: str, bundle: bytes, signer: str, kind: str
    ) -> Signature:
        signature, version = self._signatures.adopt(name, digest, bundle, signer, kind)
        if version is not None:  # stored now: a "sign" event, as signing here records
            detail = {"signers": [signer], "adopted": True}
            self.event_log.record("sign", name, version, detail)
        return signature

    def adopt_findings(self, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
        return self._findings.adopt(name, rows)

    # -- what needs the database in this process ---------------------------------------------

    def upgrade_report(
        self,
        target: str,
        reference: str | None,
        platform: str | None,
        store: bool,
        timeout: float,
    ) -> builtins.list[UpgradeRow]:
        return self._findings.upgrade_report(
            target, reference, platform=platform, store=store, timeout=timeout
        )

    def enqueue_audits(
        self, reference: str | None, platform: str | None, timeout: float
    ) -> builtins.list[QueuedJob]:
        return _queue.enqueue(self.engine, self.queries, reference, platform, timeout)

    def check_audit_queue(self) -> None:
        _queue.check(self.engine)

    def run_audit_worker(self, registry: Any, platforms: Sequence[str], options: Any) -> None:
        _queue.run_worker(registry, self.engine, platforms, **options)

    def examples_of(self, name: str, version: int) -> bytes | None:
        digest = self.queries.examples_digest(name, version)
        return None if digest is None else self.read_blob(digest)

    def record_event(self, kind: str, name: str, version: int, detail: Mapping[str, Any]) -> Event:
        return self.event_log.record(kind, name, version, detail)

    def enqueue_rescues(
        self, candidates: Sequence[Any], python: str | None, timeout: float
    ) -> builtins.list[Any]:
        from jaxport.registry._rescue_queue import enqueue_rescues

        return enqueue_rescues(self.engine, candidates, python, timeout)

    # -- the jax-release watcher (``_releases``, ``_forecast``) -------------------------------

    def watch_jax(self, options: Mapping[str, Any]) -> WatchReport:
        from jaxport.registry._releases import watch

        return watch(self.engine, self.event_log, **options)

    def forecast(self, reference: str | None) -> builtins.list[VariantForecast]:
        from jaxport.registry import _forecast

        refs = _forecast.targets(self.queries, reference)
        names = sorted({r.name for r in refs})
        findings = [f for n in names for f in self.audit_results(n, None, None, 1_000_000)]
        return _forecast.forecast(refs, findings, _forecast.newest_seen(self.engine))


def _open_sqlite_directory(url: str, config: RegistryConfig) -> None:
    """Makes the embedded default registry's directory; refuses any other SQLite file whose
    directory is missing (``check_sqlite_directory``).

    Raises:
        RegistryError: the directory of ``url``'s database file does not exist.
    """
    path = sqlite_file(url)
    if path is not None and url == config.default_database_url():
        path.parent.mkdir(parents=True, exist_ok=True)
    check_sqlite_directory(url)
