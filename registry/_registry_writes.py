"""``Registry``'s writes: push (whole, or in parts a server received), alias moves, signing,
delete, gc and verify; argument checks and the signature policy here, the work in the backend
(``registry/_backend.py``). A mixin of ``Registry`` (``registry/_registry.py``), kept apart so
no module of the facade passes 600 lines."""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jaxport import InvalidNameError
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry._backend import Backend, PushOptions, Rules
from jaxport.registry._lineage import LineageInput, capture, check_derivation, source_of
from jaxport.registry._names import (
    check_allowlist,
    check_digest,
    check_metadata,
    check_name,
    check_names,
    check_seconds,
    check_timeout,
    check_version,
)
from jaxport.registry._signatures import Signature, SignatureCheck, SignaturePolicy
from jaxport.registry._types import GcReport, PushResult, Ref, VerifyReport

if TYPE_CHECKING:
    from jaxport.audit import Example
    from jaxport.registry._uploads import ArchiveParts

#: What ``push`` takes: an ``Exported``, a ``Model``, archive bytes or a path.
Source = Any

__all__ = ["RegistryWrites"]


class RegistryWrites:
    """``Registry``'s writes (see ``Registry``)."""

    _backend: Backend
    require_signatures: SignaturePolicy | None

    # -- writing ----------------------------------------------------------------------------

    def push(
        self,
        source: Source | Sequence[Source],
        name: str | None = None,
        *,
        vjp_order: int = 0,
        aliases: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        examples: Sequence[Example | tuple[Any, ...]]
        | Mapping[str, Sequence[Example | tuple[Any, ...]]]
        | None = None,
        max_size: int = DEFAULT_MAX_READ,
        allow_custom_calls: Sequence[str] = (),
        tolerance: float | tuple[float, float] | Mapping[str, float] | None = None,
        derived_from: str | Ref | None = None,
        derivation: str | None = None,
    ) -> PushResult:
        """Stores one artifact (or a list: the variants of one version) as a new version.

        A source is a ``jax.export.Exported``, a ``jaxport.Model``, the bytes of a jaxport
        archive (of a function or a model) or of jax's own ``Exported.serialize()`` (told
        apart by content), or a path to either. A jaxport archive is validated in full (a
        model's every method, VJP order and tensor digest) and stored verbatim (its digest is
        the file's sha256; ``pull_bytes`` gives the same bytes back). A model archive is stored
        in parts: each tensor's section (raw, or zstd as ``Model.save(compress=True)`` wrote
        it) is a blob of its own, shared by every version that holds the same bytes, so a
        version that changes one layer stores one new tensor; a ``jaxport.Model`` is stored
        raw, each tensor hashed and written from the model's own array (the archive is never
        joined in memory); jax-native bytes are converted once, keeping every VJP order they
        carry; an Exported is written with ``jaxport.dumps(exp, vjp_order=vjp_order)``.
        Pushing the same archives (and examples) again returns the existing version and
        rewrites any of its blobs that is missing or corrupt. A failed push leaves the
        registry as it was and consumes no version number; ``gc`` running beside it never
        deletes a blob it needs.

        Through a registry server, the archives are made and split into parts here (a path or
        archive bytes without importing jax), only the parts the server lacks are sent, then
        the server validates and stores the version as above, in its sandbox; golden examples
        are made here (outputs computed by a source passed as an object that runs here) and
        sent as one more part.

        Args:
            source: what to store (see above), or a list of them (one per platform or
                device count, say): all functions or all models.
            name: defaults to the first artifact's ``fun_name``; required for a model.
            vjp_order: VJP orders written with an ``Exported`` (archives and models keep
                their own).
            aliases: aliases to point at the version, e.g. ``["prod"]``.
            metadata: the version's user strings (never written into an archive).
            examples: golden examples that audits re-run: ``Example(args, kwargs, outputs)``
                or ``(args, kwargs)`` tuples; outputs left None are computed now by the first
                variant passed as an ``Exported`` or ``Model`` object that runs here (archive
                bytes and files are never called here: give their outputs). For a model,
                ``{method: [Example(args), ...]}``: the method's own arguments, without the
                parameters.
            max_size: the largest file a path may name, in bytes (default 64 GiB); a path
                must name a regular file (not a FIFO or a device). Both are checked before a
                byte is read.
            allow_custom_calls: custom-call targets an archive's modules may call besides those
                some jax release guarantees stable (as ``jaxport.loads``), e.g. a Pallas Triton
                kernel's ``("__gpu$xla.gpu.triton",)``: only from authors you trust.
            tolerance: how far audits let the examples' outputs move, instead of the rule per
                dtype and output magnitude (``jaxport.audit._examples.tolerance``): a number
                (rtol = atol, as jax's ``assertAllClose(tol)``), ``(rtol, atol)`` or
                ``{"rtol": ..., "atol": ...}``; stored in the examples blob (so another
                tolerance is another version). Needs ``examples``.
            derived_from: the version this one derives from (lineage: ``lineage``), as
                ``"NAME:VERSION"`` or a ``Ref``; it must exist. Default: a model made by
                ``Model.update_params`` from a model pulled from this registry derives from
                that version (``update_params``; none if it was deleted since); archives
                identical, in order, to an earlier version of the name, pushed with other
                examples, derive from it (``examples``, also over ``update_params``: the
                update is recorded on that version); else none.
            derivation: how: ``"update_params"``, ``"rescue"``, ``"examples"`` or
                ``"explicit"`` (the default where ``derived_from`` is given).

        Provenance is recorded with the version where this process knows it (``Provenance``):
        the git commit of the working directory (``-dirty`` for changed tracked files), the
        exporting function's name, the installed jax and jaxlib, the host and the user; a
        registry server stores what its client reports. A push whose archives (and examples)
        are already a version changes neither its lineage nor its provenance.

        Returns:
            A ``PushResult``: the version's ``Ref``, whether it was created, notes (e.g. what
            jax's native format lost) and the digests of repaired blobs.

        Under ``require_signatures``, an alias with a rule is moved after the push, as
        ``alias`` moves it: a version just pushed is not signed yet, so that move is refused
        (``SignatureError``; the version stays): sign it, then move the alias. Likewise a
        protected alias whose gates the version fails is not moved (``GateError``, whose
        ``version`` is the version pushed; the other aliases move).

        Raises:
            InvalidNameError: a bad name, alias, metadata entry or source type; functions and
                models in one version; a model without ``name``; ``derived_from`` that is not
                ``NAME:VERSION`` or a ``Ref``, an unknown ``derivation``, or one without
                ``derived_from``.
            NotFoundError: a path that does not exist; ``derived_from`` names no version.
            TypeError: ``allow_custom_calls`` is one string (as ``jaxport.loads``).
            InvalidNameError: also a path that is not a regular file, or over ``max_size``.
            CorruptArchiveError: bytes that are neither a valid jaxport archive nor jax-native.
            IntegrityError: a digest of the archive (a model's tensor's, say) does not match.
            SchemaVersionError: the database is newer than this jaxport.
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``; examples
                with a model; a model archive not laid out as jaxport writes them.
            GateError: the version was pushed, but a protected alias's gates refused it
                (that alias not moved; ``.version`` is the version pushed).
        """
        sources = builtins.list(source) if isinstance(source, builtins.list | tuple) else [source]
        if not sources:
            raise InvalidNameError("push needs at least one Exported, archive or path")
        if name is not None:
            check_name(name)
        alias_names = check_names(aliases, "alias")
        if isinstance(vjp_order, bool) or not isinstance(vjp_order, int) or vjp_order < 0:
            raise InvalidNameError(f"vjp_order must be an int >= 0, got {vjp_order!r:.40}")
        if tolerance is not None and not examples:
            raise InvalidNameError("a tolerance applies to golden examples: pass examples too")
        check_allowlist(allow_custom_calls)
        source, how = check_derivation(derived_from, derivation)
        if source is None and (source := source_of(sources, self._backend.url)) is not None:
            how = "update_params"
        self._backend.check_writable()
        ruled = [a for a in alias_names if self._alias_rules(a)]
        options = PushOptions(
            vjp_order=vjp_order, aliases=[a for a in alias_names if a not in ruled],
            metadata=check_metadata(metadata), examples=examples, max_size=max_size,
            allow_custom_calls=builtins.list(allow_custom_calls), tolerance=tolerance,
            lineage=LineageInput(source, how, capture(sources)),
        )  # fmt: skip
        result = self._backend.push(sources, name, options)
        for alias in ruled:
            self.alias(result.name, alias, result.version)
        return result

    # -- pushes in parts (registry/_uploads.py: the server's content-addressed uploads) ------
    # receive_blob and push_parts are what a registry server does with what its clients send:
    # through a server, push sends the parts itself, so these raise UnsupportedFeatureError.

    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        """Of ``digests`` (archive parts), those the blob store does not hold (through a
        registry server: those it asks this token to send), once each.

        Raises:
            InvalidNameError: a digest that is not 64 lowercase hex digits.
        """
        return self._backend.missing_blobs(digests)

    def receive_blob(
        self, digest: str, chunks: Iterable[bytes], *, max_size: int = DEFAULT_MAX_READ
    ) -> int:
        """Stores the part ``chunks`` make if its sha256 is ``digest``; returns its size in
        bytes. It is referred to by nothing until ``push_parts`` commits a version that uses
        it (``gc`` keeps it for ``min_age`` meanwhile).

        Raises:
            IntegrityError: the sha256 of the bytes is not ``digest``: nothing is stored.
            InvalidNameError: over ``max_size`` bytes, or a malformed digest.
            UnsupportedFeatureError: through a registry server.
        """
        check_digest(digest)
        self._backend.check_writable()
        return self._backend.receive_blob(digest, chunks, max_size)

    def push_parts(
        self, archives: Sequence[ArchiveParts], name: str | None = None, **push: Any
    ) -> PushResult:
        """``push`` of archives whose parts are stored already (``receive_blob``): each is put
        together from its parts (every part and the whole digest verified) into a temporary
        file and pushed as that file, with ``push``'s keywords.

        Raises:
            IntegrityError: a part is missing (``.expected`` names it) or corrupt, or the
                parts do not make the archive's digest.
            InvalidNameError: the parts are not the archive's layout (``_uploads.plan_parts``).
            UnsupportedFeatureError: through a registry server.
            (and see ``push``)
        """
        self._backend.check_writable()
        return self._backend.push_parts(archives, lambda paths: self.push(paths, name, **push))

    def alias(
        self,
        name: str,
        alias: str,
        version: int | None,
        *,
        override: bool = False,
        reason: str | None = None,
    ) -> None:
        """Points ``name@alias`` at ``version`` (None: removes it), in one transaction; every
        move is kept in ``alias_history``. A protected alias (``protect``) moves only to a
        version that passes its gates, evaluated in that transaction; ``override=True`` with
        a ``reason`` moves it anyway (a direct registry, or through a server an admin token
        without name prefixes), the event recording the reason and the failed gates.

        Raises:
            NotFoundError: no such name or version.
            InvalidNameError: a bad name, alias or version; ``override`` without a reason.
            GateError: the version fails a gate of the protected alias (``.failures`` lists
                every one) and there is no override.
            PermissionDeniedError: through a server, an override by a token that is not an
                admin without name prefixes.
            SignatureError: under ``require_signatures``, the version is not signed as the
                registry's keys or the alias's rule require (see ``SignaturePolicy``).
        """
        check_name(name)
        check_name(alias, "alias")
        if version is not None:
            check_version(version)
        if override and not (isinstance(reason, str) and reason.strip()):
            raise InvalidNameError("an override needs a reason (the event records it)")
        if override and reason is not None and len(reason) > 1000:
            raise InvalidNameError("an override's reason is at most 1000 characters")
        self._backend.check_writable()
        rules = self._alias_rules(alias) if version is not None else []
        if rules:
            for variant in self._backend.get(f"{name}:{version}").variants:
                self._backend.check_signed(variant, rules)
        self._backend.alias(name, alias, version, reason.strip() if override and reason else None)

    def sign(
        self,
        reference: str,
        *,
        private_key: str | os.PathLike[str],
        password: str | None = None,
        certificate: str | os.PathLike[str] | None = None,
        certificate_chain: Sequence[str | os.PathLike[str]] = (),
    ) -> builtins.list[Signature]:
        """Signs every variant of a version (``model-signing``: a Sigstore bundle over each
        archive's sha256) and stores the bundles beside it; each archive is read and checked
        against its digest first. A key's earlier signature of the same archive is replaced.

        Args:
            reference: ``NAME:VERSION``, ``NAME@ALIAS``, ``sha256:PREFIX`` or ``NAME`` (newest).
            private_key: a PEM elliptic-curve private key (P-256, P-384, P-521).
            password: the key's password, if it is encrypted.
            certificate: the key's PEM certificate, with ``certificate_chain`` (intermediates,
                then root): a certificate signature, verified against CA certificates.

        Returns:
            One ``Signature`` per variant.

        Raises:
            SignatureError: the key cannot be read (wrong password, unsupported curve) or does
                not match the certificate.
            IntegrityError: a variant's archive is missing or corrupt: nothing of it is signed.
            UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``);
                through a registry server (sign with a direct registry).
            (and see ``get``)
        """
        self._backend.check_writable()
        key = {"private_key": private_key, "password": password, "certificate": certificate,
               "certificate_chain": certificate_chain}  # fmt: skip
        return self._backend.sign(reference, key)

    def signatures(self, reference: str) -> builtins.list[Signature]:
        """The signatures stored for a version's variants, as stored (not verified: see
        ``verify_signatures``).

        Raises:
            (see ``get``)
        """
        return self._backend.signatures(reference)

    def verify_signatures(
        self, reference: str, keys: Sequence[str | os.PathLike[str] | bytes]
    ) -> builtins.list[SignatureCheck]:
        """Each variant of a version, checked: does a stored signature verify with one of
        ``keys`` (PEM public keys or CA certificates, paths or bytes) over its archive? If not,
        the check says why (no signature, other signers, one that does not verify).

        Raises:
            SignatureError: a key that is not a PEM public key or certificate.
            UnsupportedFeatureError: through a registry server (verify with a direct registry).
            (and see ``get``)
        """
        trusted = SignaturePolicy(keys).keys
        return self._backend.verify_signatures(reference, trusted)

    def delete(self, name: str, version: int | None = None, *, force: bool = False) -> None:
        """Deletes a version (or, with ``version`` None, every version of the name); blobs stay
        until ``gc``. Version numbers are never handed out again, also after a whole name.

        Raises:
            NotFoundError: no such name or version.
            ConflictError: aliases point at what would be deleted and ``force`` is False (with
                ``force`` they are removed too).
        """
        check_name(name)
        if version is not None:
            check_version(version)
        self._backend.check_writable()
        self._backend.delete(name, version, bool(force))

    def gc(
        self, *, dry_run: bool = False, min_age: float = 3600.0, temp_age: float = 3600.0
    ) -> GcReport:
        """Removes blobs nothing refers to, and stale temporary files; ``dry_run`` only reports.
        First it removes for good the versions a retention run deleted whose restore period
        is over (``GcReport.purged``; one ``purge`` event each), so their blobs go too.

        Safe beside concurrent pushes at any ``min_age`` and ``temp_age`` (see
        ``registry/_publish.py``): a temporary file of a push in flight is never removed.

        Args:
            dry_run: report what would be removed, remove nothing.
            min_age: keep unreferenced blobs younger than this, in seconds: the parts an
                interrupted upload through a server sent (so that it resumes without sending
                them again), or blobs an older jaxport's push in flight wrote.
            temp_age: remove temporary files of killed writes older than this, in seconds
                (a younger one may belong to a write of an older jaxport still in progress).

        Raises:
            InvalidNameError: ``min_age`` or ``temp_age`` is not a finite number >= 0.

        Returns:
            A ``GcReport``: removed digests and bytes, and what was kept back and why.
        """
        min_age = check_seconds(min_age, "min_age")
        temp_age = check_seconds(temp_age, "temp_age")
        if not dry_run:
            self._backend.check_writable()
        return self._backend.gc(bool(dry_run), min_age, temp_age)

    def verify(self, *, deep: bool = False, timeout: float = 120.0) -> VerifyReport:
        """Recomputes the digest of every blob the database refers to; names each version that
        a missing or corrupt blob affects.

        Args:
            deep: also read every archive in full, each module parsed, in a worker process
                (jaxlib may crash on a malformed module): a header whose custom-call targets
                disagree with its modules, or any other unreadable part, is ``invalid``.
            timeout: with ``deep``, seconds one archive may take before its worker is killed
                (the archive is then ``invalid``, naming the limit); > 0, at most a day.

        Raises:
            InvalidNameError: a ``timeout`` that is not > 0 and at most a day.
        """
        return self._backend.verify(bool(deep), check_timeout(timeout, "timeout"))

    def _alias_rules(self, alias: str) -> Rules:
        """The signature policy's rules for a move of ``alias`` (none without a policy)."""
        policy = self.require_signatures
        return [] if policy is None else policy.rules(alias)
