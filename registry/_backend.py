"""The contract below ``Registry``: what a registry backend does, stated once.

``Registry`` (``registry/_registry.py``) is the facade users call: it checks arguments, applies
the local-platform default, the signature policy and the pull rules, then calls one
``Backend``. Two implement it, neither inheriting the other's behaviour (MLflow's
``AbstractStore`` with its ``SqlAlchemyStore`` and ``RestStore`` is the model):

- ``SqlBackend`` (``registry/_sql.py``): a SQLAlchemy database (SQLite, PostgreSQL) and a blob
  store, in this process.
- ``HttpBackend`` (``registry/_http_backend.py``): a registry server (``jaxport serve``), over
  HTTP; it imports neither jax nor SQLAlchemy until a call needs jax (building an ``Exported``).

The operations every backend has are abstract here. Those one backend lacks (signing needs the
blob store, the audit queue the database, ...) are not: their default here raises
``UnsupportedFeatureError`` through ``lacks``, the one place that names the capability, the
backend and what to use instead. Arguments reach a backend checked and normalised (platforms
lower case, ``None`` for any); a backend raises the typed errors the facade documents.

This module imports nothing heavy: a client that never builds an ``Exported`` loads no jax.
"""

from __future__ import annotations

import abc
import builtins
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from jaxport import UnsupportedFeatureError

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport._signing import Trusted
    from jaxport.audit import Change, Finding, UpgradeRow
    from jaxport.export import Model
    from jaxport.registry._blobs import BlobStore
    from jaxport.registry._events import Event
    from jaxport.registry._gate_types import AliasGates, GateCheck
    from jaxport.registry._lineage import Lineage
    from jaxport.registry._queue import QueuedJob
    from jaxport.registry._retention_types import RetentionPlan, RetentionPolicy
    from jaxport.registry._signatures import Signature, SignatureCheck
    from jaxport.registry._streams import BlobStream
    from jaxport.registry._tokens import NewToken, TokenInfo
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
    from jaxport.registry._watch_types import VariantForecast, WatchReport

__all__ = ["Backend", "PushOptions", "Rules", "TokenStore"]

#: A signature policy's rules for one pull or alias move: (what the rule is, its keys).
Rules = builtins.list[tuple[str, tuple["Trusted", ...]]]


class TokenStore(Protocol):
    """``Registry.tokens``: the registry server's bearer tokens (scope ``admin`` through a
    server). Both backends' stores take these calls; the SQL one takes more (the server's)."""

    def create(
        self,
        name: str,
        scope: str = "read",
        *,
        prefixes: Sequence[str] = (),
        expires_in: float | None = None,
    ) -> NewToken:
        """A new token; its secret is in the answer and nowhere else."""

    def list(self) -> builtins.list[TokenInfo]:
        """Every token (never a secret)."""

    def revoke(self, name: str) -> TokenInfo:
        """Revokes the token ``name``."""


class PushOptions(dict[str, Any]):
    """``Registry.push``'s keywords, checked by the facade: ``vjp_order``, ``aliases`` (a
    list), ``metadata`` (a dict), ``examples``, ``max_size``, ``allow_custom_calls`` (a list)
    and ``tolerance``."""


class Backend(abc.ABC):
    """One registry's storage and transport; see the module's doc.

    Attributes:
        kind: how messages name the backend (``"a SQL registry"``, ``"a registry server"``).
        instead: what to use for a capability it lacks, as a clause.
        url: the registry's URL, any password masked.
        blobs: the blob store, where this process holds one (None through a server).
        tokens: the server's bearer tokens.
    """

    kind: str
    instead: str
    url: str
    blobs: BlobStore | None
    tokens: TokenStore

    def lacks(self, capability: str) -> NoReturn:
        """Refuses a capability this backend does not have: the one place that says so.

        Raises:
            UnsupportedFeatureError: always, naming ``capability``, the backend and
                ``instead``.
        """
        raise UnsupportedFeatureError(
            f"{capability}: not available through {self.kind} ({self.url}); {self.instead}"
        )

    @abc.abstractmethod
    def close(self) -> None:
        """Releases connections."""

    def check_writable(self) -> None:
        """Raises before a write this backend knows will fail (an SQL database newer than
        this jaxport: ``SchemaVersionError``); a server checks each write itself."""
        return None

    # -- metadata reads ----------------------------------------------------------------------

    @abc.abstractmethod
    def names(self) -> builtins.list[str]:
        """``Registry.names``."""

    @abc.abstractmethod
    def get(self, reference: str) -> Ref:
        """``Registry.get``: a model variant with its methods and tensors."""

    @abc.abstractmethod
    def list(
        self, name: str | None, limit: int, after: tuple[str, int] | None
    ) -> builtins.list[Ref]:
        """``Registry.list``."""

    @abc.abstractmethod
    def search(
        self, filters: Mapping[str, Any], limit: int, after: int | None
    ) -> builtins.list[VariantInfo]:
        """``Registry.search`` (filters None: not given)."""

    @abc.abstractmethod
    def resolve(self, reference: str, platform: str | None, nr_devices: int | None) -> Resolution:
        """``Registry.resolve`` with a normalised ``platform`` (None: any)."""

    @abc.abstractmethod
    def aliases(self, name: str) -> dict[str, int]:
        """``Registry.aliases``."""

    @abc.abstractmethod
    def alias_history(self, name: str, alias: str | None) -> builtins.list[AliasMove]:
        """``Registry.alias_history``."""

    @abc.abstractmethod
    def events(self, name: str | None, limit: int, before: int | None) -> builtins.list[Event]:
        """``Registry.events``."""

    def lineage(self, reference: str, depth: int | None) -> Lineage:
        """``Registry.lineage`` (``registry/_lineage.py``)."""
        self.lacks("lineage")

    @abc.abstractmethod
    def audit_results(
        self, name: str | None, jax_version: str | None, platform: str | None, limit: int
    ) -> builtins.list[Finding]:
        """``Registry.audit_results``."""

    @abc.abstractmethod
    def diff(self, a: str, b: str) -> builtins.list[Change]:
        """``Registry.diff``."""

    @abc.abstractmethod
    def signatures(self, reference: str) -> builtins.list[Signature]:
        """``Registry.signatures``."""

    # -- blob reads --------------------------------------------------------------------------

    @abc.abstractmethod
    def read_blob(self, digest: str) -> bytes:
        """``Registry.read_blob``: verified against ``digest``."""

    @abc.abstractmethod
    def read_range(self, digest: str) -> Callable[[int, int], bytes]:
        """A reader of ``[start, end)`` of the blob or archive ``digest`` (``inspect``)."""

    @abc.abstractmethod
    def archive(self, reference: str, chosen: VariantInfo) -> bytes:
        """The archive of ``chosen``, exactly as pushed, verified (``pull_bytes``)."""

    @abc.abstractmethod
    def write_file(self, reference: str, chosen: VariantInfo, path: str | os.PathLike[str]) -> None:
        """``archive`` written to ``path`` atomically (``pull_file``)."""

    @abc.abstractmethod
    def function(
        self, reference: str, chosen: VariantInfo, allow_custom_calls: Sequence[str]
    ) -> Exported:
        """The ``Exported`` of a function variant (``pull``)."""

    @abc.abstractmethod
    def model(self, chosen: VariantInfo, allow_custom_calls: Sequence[str]) -> Model:
        """The ``Model`` of a model variant (``pull_model``; ``pull(method=)``)."""

    def blob_stream(self, digest: str) -> BlobStream:
        """``Registry.blob_stream``."""
        self.lacks("blob_stream (use read_blob or pull_file)")

    # -- writes ------------------------------------------------------------------------------

    @abc.abstractmethod
    def push(
        self, sources: builtins.list[Any], name: str | None, options: PushOptions
    ) -> PushResult:
        """``Registry.push`` of ``sources`` (at least one), the aliases without a signature
        rule (the facade moves the others)."""

    @abc.abstractmethod
    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        """``Registry.missing_blobs``."""

    def receive_blob(self, digest: str, chunks: Iterable[bytes], max_size: int) -> int:
        """``Registry.receive_blob``."""
        self.lacks("receive_blob (push uploads its parts itself)")

    def push_parts(
        self, archives: Sequence[ArchiveParts], push: Callable[[builtins.list[Any]], PushResult]
    ) -> PushResult:
        """``Registry.push_parts``: ``archives`` put together from stored parts into files (or
        ``_uploads.StoredModel``s: ``_uploads.sources``), handed to ``push`` (the facade's
        ``push``, keywords bound) while they exist."""
        self.lacks("push_parts (push uploads its parts itself)")

    @abc.abstractmethod
    def alias(
        self, name: str, alias: str, version: int | None, override: str | None = None
    ) -> None:
        """``Registry.alias`` (the signature rules checked already; a protected alias's
        gates evaluated in the move's transaction; ``override``: an override's reason)."""

    # -- protected aliases (registry/_gates.py) ------------------------------------------------

    def protect(self, name: str, alias: str, spec: Mapping[str, Any]) -> AliasGates:
        """``Registry.protect`` (``spec`` checked by ``_gates.check_gate_spec``)."""
        self.lacks("protected aliases")

    def unprotect(self, name: str, alias: str) -> None:
        """``Registry.unprotect``."""
        self.lacks("protected aliases")

    def gates(self, name: str) -> builtins.list[GateCheck]:
        """``Registry.gates``."""
        self.lacks("protected aliases")

    def check_gates(self, name: str, alias: str, version: int) -> GateCheck | None:
        """``Registry.check_gates``."""
        self.lacks("protected aliases")

    @abc.abstractmethod
    def delete(self, name: str, version: int | None, force: bool) -> None:
        """``Registry.delete``."""

    @abc.abstractmethod
    def gc(self, dry_run: bool, min_age: float, temp_age: float) -> GcReport:
        """``Registry.gc``."""

    @abc.abstractmethod
    def verify(self, deep: bool, timeout: float) -> VerifyReport:
        """``Registry.verify``."""

    # -- retention (``registry/_retention.py``) ---------------------------------------------

    def retention_policies(self) -> builtins.list[RetentionPolicy]:
        """``Registry.retention_policies``."""
        self.lacks("retention")

    def set_retention_policy(self, policy: RetentionPolicy) -> RetentionPolicy:
        """``Registry.set_retention_policy`` (``policy`` checked)."""
        self.lacks("retention")

    def remove_retention_policy(self, prefix: str) -> RetentionPolicy:
        """``Registry.remove_retention_policy``."""
        self.lacks("retention")

    def retain(self, prefix: str | None, dry_run: bool) -> RetentionPlan:
        """``Registry.retain``."""
        self.lacks("retention")

    def restore(self, name: str, version: int) -> Ref:
        """``Registry.restore``."""
        self.lacks("retention")

    @abc.abstractmethod
    def audit(
        self,
        reference: str | None,
        platform: str | None,
        store: bool,
        python: str | os.PathLike[str] | None,
        options: Mapping[str, Any],
    ) -> builtins.list[Finding]:
        """``Registry.audit``; ``options``: ``timeout``, ``force``, ``level``, ``workers``,
        ``progress``, ``tolerance`` and ``jax`` (a release, not with ``python``), checked."""

    # -- signatures --------------------------------------------------------------------------

    def sign(self, reference: str, key: Mapping[str, Any]) -> builtins.list[Signature]:
        """``Registry.sign``; ``key``: ``private_key``, ``password``, ``certificate``,
        ``certificate_chain``."""
        self.lacks("signing")

    def check_signed(self, variant: VariantInfo, rules: Rules) -> builtins.list[str]:
        """The signer that meets each of ``rules`` for ``variant``.

        Raises:
            SignatureError: a rule is not met.
        """
        self.lacks("a signature policy (require_signatures)")

    def verify_signatures(
        self, reference: str, keys: Sequence[Trusted]
    ) -> builtins.list[SignatureCheck]:
        """``Registry.verify_signatures`` with loaded keys."""
        self.lacks("signature verification of stored versions")

    def adopt_signature(
        self, name: str, digest: str, bundle: bytes, signer: str, kind: str
    ) -> Signature:
        """Stores a signature made elsewhere (an OCI referrer, a mirror's source) of the
        archive ``digest`` of a version of ``name`` as ``sign`` stores its own, checked
        first (``registry/_adoption.py``: ``bundle`` signs exactly ``digest``; ``signer`` and
        ``kind`` as the source recorded them choose which bundles a check tries, as ever);
        the same bundle again stores nothing.

        Raises:
            SignatureError: a bundle that is not one of ``digest`` by ``signer``.
            ConflictError: ``signer`` has another signature of ``digest`` stored.
            NotFoundError: no version of ``name`` has the archive ``digest``.
            PermissionDeniedError: (a server) the token may not write ``name``.
        """
        self.lacks("storing a signature made elsewhere (a mirror or an OCI pull)")

    def adopt_findings(self, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Stores audit findings measured elsewhere (``audits`` rows: ``digest``, ``level``,
        ``jax_version``, ..., ``registry/_adoption.py``'s ``FINDING_FIELDS``) about archives
        of versions of ``name``, each at most once; returns how many were new.

        Raises:
            InvalidNameError: a row that is not a finding.
            NotFoundError: a finding of an archive that no version of ``name`` has.
            PermissionDeniedError: (a server) the token may not write ``name``.
        """
        self.lacks("storing audit findings made elsewhere (a mirror or an OCI pull)")

    # -- what needs the database in this process ---------------------------------------------

    def upgrade_report(
        self,
        target: str,
        reference: str | None,
        platform: str | None,
        store: bool,
        timeout: float,
    ) -> builtins.list[UpgradeRow]:
        """``Registry.upgrade_report``."""
        self.lacks("upgrade reports")

    def enqueue_audits(
        self, reference: str | None, platform: str | None, timeout: float
    ) -> builtins.list[QueuedJob]:
        """``Registry.enqueue_audits``."""
        self.lacks("the audit queue")

    def check_audit_queue(self) -> None:
        """``Registry.check_audit_queue``."""
        self.lacks("the audit queue")

    def run_audit_worker(self, registry: Any, platforms: Sequence[str], options: Any) -> None:
        """``Registry.run_audit_worker``: jobs audited through ``registry.audit``."""
        self.lacks("audit workers")

    # -- the jax-release watcher (``registry/_releases.py``, ``registry/_forecast.py``) -------

    def watch_jax(self, options: Mapping[str, Any]) -> WatchReport:
        """``Registry.watch_jax`` (``options`` checked: index, dry_run, prereleases,
        enqueue, timeout)."""
        self.lacks("the jax-release watcher")

    def forecast(self, reference: str | None) -> builtins.list[VariantForecast]:
        """``Registry.forecast``."""
        self.lacks("forecasts")

    # -- fleet rescue (``registry/_fleet_rescue.py``) -----------------------------------------

    @abc.abstractmethod
    def examples_of(self, name: str, version: int) -> bytes | None:
        """A version's golden examples blob (``registry/_golden.py``), None without one."""

    @abc.abstractmethod
    def record_event(self, kind: str, name: str, version: int, detail: Mapping[str, Any]) -> Event:
        """Appends an event of a write made of other writes (a ``rescue``: its push and
        alias moves recorded theirs), by the current actor; the server takes ``rescue``
        only, for a name its token may write."""

    def enqueue_rescues(
        self, candidates: Sequence[Any], python: str | None, timeout: float
    ) -> builtins.list[Any]:
        """``Registry.rescue(enqueue=True)``: one queued job per candidate."""
        self.lacks("the audit queue")
