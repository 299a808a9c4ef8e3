"""``Registry``'s audits: run them, read their stored findings, jax window and upgrade reports,
diffs, and the audit queue; argument checks here, the work in the backend
(``registry/_backend.py``). A mixin of ``Registry`` (``registry/_registry.py``), kept apart so
no module of the facade passes 600 lines."""

from __future__ import annotations

import builtins
import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from jaxport import InvalidNameError
from jaxport.registry._backend import Backend
from jaxport.registry._names import (
    check_name,
    check_seconds,
    check_timeout,
    normalize_platform,
    parse_reference,
)
from jaxport.registry._types import Ref

if TYPE_CHECKING:
    from jaxport.audit import Change, Finding, UpgradeRow
    from jaxport.registry._queue import QueuedJob
    from jaxport.registry._windows import VariantWindow

__all__ = ["RegistryAudits"]

#: Versions read per request when a report reads them all.
_PAGE = 10_000
#: The largest page of stored findings (``check_limit``): a report reads a name's in one.
_ALL = 1_000_000


class RegistryAudits:
    """``Registry``'s audits (see ``Registry``)."""

    _backend: Backend

    def audit(
        self,
        reference: str | None = None,
        *,
        platform: str | None = None,
        store: bool = True,
        python: str | os.PathLike[str] | None = None,
        timeout: float = 120.0,
        force: bool = False,
        level: str = "full",
        workers: int = 1,
        jax: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        tolerance: float | tuple[float, float] | Mapping[str, float] | str | None = None,
    ) -> builtins.list[Finding]:
        """Audits variants with a jax: loads, compiles, re-runs golden examples (``jaxport.audit``).

        Each variant is audited for each platform it was exported for (or only ``platform``),
        by this process (a direct registry) or by the server (through a registry server: its
        jax, its workers; the findings recorded there), in a worker process
        (``python -m jaxport.audit._worker``) with time and memory limits, so a crash in
        jaxlib becomes a ``crash`` finding. A check that cannot run here (no such device, too
        few devices) is ``not-run``, with the reason.

        Incremental: a stored finding with the same digest x level x jax x jaxlib x platform x
        devices is returned again (``Finding.reused``) instead of measured, unless ``force``;
        when every finding is stored, no worker starts and no module is parsed. Versions that
        share an archive (and golden examples) are measured once.

        Args:
            reference: ``NAME:VERSION`` / ``NAME@ALIAS`` / ``sha256:PREFIX`` (that version),
                ``NAME`` (all its versions) or None (every version in the registry).
            platform: audit only for this platform (any case; ``gpu``: the local GPU kind).
            store: record the findings in the registry (``audit_results``).
            python: audit with the jax of another environment: an interpreter where jaxport
                and another jax release are installed. The archives are handed to it; the
                database is not (no URL or password leaves this process).
            timeout: seconds one variant's audit may take before it is killed (``crash``);
                a module that hangs the parser is stopped sooner, by the module sandbox;
                > 0, at most a day.
            force: measure again even where a finding with the same key is stored.
            level: ``"full"`` (load, compile, golden examples) or ``"static"`` (the facts
                recorded at push against the jax's capabilities: nothing parsed or compiled;
                ``jaxport.audit._static``).
            workers: worker processes auditing at once (full level), each importing jax once.
            jax: a jax release (``"0.7.0"``): audit in an environment with that jax and
                this jaxport, made once under ``$JAXPORT_HOME/envs/jax-RELEASE`` and reused
                (``uv`` when on PATH, else venv and pip; the first time takes minutes and
                needs the package index). Not with ``python``.
            progress: called as ``progress(done, total)`` as the audit advances (counting
                measurements: stored ones are done from the start).
            tolerance: compare the golden examples with this tolerance instead of the one
                stored with them (``push(..., tolerance=...)``, else the rule per dtype and
                output magnitude); as ``push``'s, or the CLI's ``"1e-4"`` /
                ``"rtol=1e-5,atol=1e-4"``. Its findings are stored apart (keyed by the
                examples with that tolerance), so they never stand for the stored tolerance.

        Returns:
            One ``Finding`` per variant and platform.

        Raises:
            NotFoundError: no such name, version or alias; ``python`` does not exist.
            InvalidNameError: an unknown platform or level, workers < 1, a ``timeout`` that
                is not > 0 and at most a day, both ``python`` and ``jax``, a ``jax`` that is
                not a release number.
            AuditError: the worker could not start (e.g. no jaxport in that environment), or
                the environment for ``jax`` could not be made.
            UnsupportedFeatureError: through a registry server, ``python``, ``jax``,
                ``tolerance`` or ``store=False`` (audit with a direct registry for those).
        """
        if store:
            self._backend.check_writable()
        wanted = None if platform is None else normalize_platform(platform)
        if level not in ("full", "static"):
            raise InvalidNameError(f"level must be 'full' or 'static', got {level!r:.40}")
        timeout = check_timeout(timeout, "timeout")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidNameError(f"workers must be a positive int, got {workers!r:.40}")
        if jax is not None and python is not None:
            raise InvalidNameError("give python or jax, not both")
        options = {"timeout": timeout, "force": bool(force), "level": level, "workers": workers,
                   "progress": progress, "tolerance": tolerance, "jax": jax}  # fmt: skip
        return self._backend.audit(reference, wanted, bool(store), python, options)

    def audit_results(
        self,
        *,
        name: str | None = None,
        jax_version: str | None = None,
        platform: str | None = None,
        limit: int = 10_000,
    ) -> builtins.list[Finding]:
        """Stored findings, newest first, joined to the versions that hold each digest.

        Raises:
            NotFoundError: ``name`` does not exist.
            InvalidNameError: an unknown platform.
        """
        wanted = None if platform is None else normalize_platform(platform)
        return self._backend.audit_results(name, jax_version, wanted, limit)

    def windows(
        self,
        reference: str | None = None,
        *,
        expiring_before: str | datetime.date | None = None,
    ) -> builtins.list[VariantWindow]:
        """Where each variant stands in jax's 6-month backward-compatibility window, judged
        against the installed jax (``jaxport.jax_window``), with the newest jax release a stored
        audit found it ``ok`` under (``window.last_known_release``).

        Args:
            reference: as ``audit``: one version, all of a name's, or None (every version).
            expiring_before: only variants whose window ends before this date (a ``date`` or
                ``YYYY-MM-DD``), and those whose end is unknown (a producer release missing
                from ``jaxport._window.JAX_RELEASE_DATES``, or not recorded).

        Raises:
            NotFoundError: no such name, version or alias.
            InvalidNameError: a malformed reference, or ``expiring_before`` is not a date.
        """
        from jaxport.registry._windows import expiring_date, variant_windows

        before = None if expiring_before is None else expiring_date(expiring_before)
        if reference is None:
            refs = [r for n in self._backend.names() for r in self._all_versions(n)]
        else:
            parsed = parse_reference(reference)
            bare = parsed.version is None and parsed.alias is None and parsed.name is not None
            refs = self._all_versions(reference) if bare else [self._backend.get(reference)]
        names = sorted({r.name for r in refs})
        findings = [f for n in names for f in self._backend.audit_results(n, None, None, _ALL)]
        return variant_windows(refs, findings, expiring_before=before)

    def _all_versions(self, name: str) -> builtins.list[Ref]:
        """Every version of ``name``, a page at a time."""
        found: builtins.list[Ref] = []
        while True:
            after = (found[-1].name, found[-1].version) if found else None
            page = self._backend.list(check_name(name), _PAGE, after)
            found += page
            if len(page) < _PAGE:
                return found

    def upgrade_report(
        self,
        target: str | os.PathLike[str],
        reference: str | None = None,
        *,
        platform: str | None = None,
        store: bool = True,
        timeout: float = 120.0,
    ) -> builtins.list[UpgradeRow]:
        """What breaks if the running jax is replaced by ``target``, per variant and platform.

        Args:
            target: a jax release whose findings are stored (``"0.7.0"``, digits and dots),
                or an interpreter (a path, or a name on ``PATH`` such as ``python3.12``):
                then ``reference`` is audited there and here first.
            reference: limit to a name (``NAME``), or to one version (``NAME:V``,
                ``NAME@ALIAS``, a digest prefix).
            platform: limit to one platform.
            store: record the findings of audits this report runs.
            timeout: seconds one variant's audit may take (an interpreter ``target``).

        Returns:
            One row per variant (``name``, ``version``, ``digest``) and platform with a
            finding under either release, sorted, none twice; ``after`` is ``"not audited"``
            for a row the target has no finding for (those rows are named, never dropped).

        Raises:
            NotFoundError: an interpreter path that does not exist, an unknown or deleted
                name.
            UnsupportedFeatureError: through a registry server (use a direct registry).
        """
        if not isinstance(target, str | os.PathLike):
            raise InvalidNameError(f"target must be a release or a path, got {target!r:.40}")
        wanted = None if platform is None else normalize_platform(platform)
        return self._backend.upgrade_report(
            os.fspath(target), reference, wanted, bool(store), timeout
        )

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        """The changes from version ``a`` to version ``b`` (``NAME:V`` / ``NAME@ALIAS``), each
        classified breaking or compatible (``jaxport.audit``'s diff rules)."""
        return self._backend.diff(a, b)

    # -- the audit queue (PostgreSQL; registry/_queue.py) ---------------------------------

    def enqueue_audits(
        self,
        reference: str | None = None,
        *,
        platform: str | None = None,
        timeout: float = 120.0,
    ) -> builtins.list[QueuedJob]:
        """Puts audit jobs into the queue in the registry's database, one per variant and
        platform (as ``audit`` would run them here), for ``run_audit_worker`` on each
        platform's hosts to take. A job already waiting for the same archive, platform and
        device count is not added twice (its ``job_id`` is None).

        Args:
            reference, platform, timeout: as ``audit`` (``platform``: cpu, cuda, rocm, tpu).

        Returns:
            One ``QueuedJob`` per archive and platform, in registry order.

        Raises:
            UnsupportedFeatureError: not a PostgreSQL registry (SQLite: use ``audit``; a
                registry server: its database's URL), or procrastinate is not installed
                (``jaxport[queue]``).
            RegistryError: the queue's tables are missing (``jaxport db upgrade``).
            NotFoundError, InvalidNameError: as ``audit``.
        """
        self._backend.check_writable()
        return self._backend.enqueue_audits(reference, platform, check_seconds(timeout, "timeout"))

    def check_audit_queue(self) -> None:
        """Checks that this registry holds an audit queue (``enqueue_audits`` would work).

        Raises:
            UnsupportedFeatureError, RegistryError: see ``enqueue_audits``.
        """
        self._backend.check_audit_queue()

    def run_audit_worker(
        self,
        platforms: Sequence[str],
        *,
        concurrency: int = 1,
        until_idle: bool = False,
        stalled_after: float = 60.0,
        on_finding: Callable[[Finding, bool], None] | None = None,
        compile_key: str | os.PathLike[str] | None = None,
        compile_key_password: str | None = None,
    ) -> None:
        """Takes the queue's audit jobs for ``platforms`` (those this host has) and runs each
        through ``audit`` (its worker process and sandbox), recording each finding once per
        digest x jax x jaxlib x platform x devices. Runs until SIGINT or SIGTERM (the jobs in
        hand are finished first), or with ``until_idle`` until no job of those platforms waits
        or runs anywhere.

        Args:
            platforms: cpu, cuda, rocm and/or tpu.
            concurrency: jobs audited at once (each in its own audit worker process).
            until_idle: return once the queues of ``platforms`` are empty.
            stalled_after: seconds without a heartbeat after which a worker counts as dead:
                its jobs are put back in the queue (a worker sends one every 5 s, or every
                quarter of ``stalled_after`` if less).
            on_finding: called with each job's finding and whether it was recorded (False: its
                key had one already).
            compile_key: a PEM EC private key (default: ``$JAXPORT_COMPILE_KEY``, unset: none):
                after each passing full audit (``ok``) by this process's jax, the worker
                compiles that variant for this host and stores its signed compiled sets as
                ``compile`` does (one variant; within the job's timeout); a failed compile is
                logged (logger ``jaxport.audit_worker``) and fails no job
                (``registry/_queue_compile.py``).
            compile_key_password: the key's password, if it is encrypted (never logged).

        Raises:
            UnsupportedFeatureError, RegistryError: see ``enqueue_audits``.
            InvalidNameError: no platform, or one outside cpu, cuda, rocm, tpu.
            SignatureError: the compile key cannot be read or signs nothing (a wrong path or
                password), checked before any job is taken.
        """
        from jaxport.registry._queue_compile import compile_key as checked_key

        self._backend.check_writable()
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidNameError(f"concurrency must be a positive int, got {concurrency!r:.40}")
        options = {"concurrency": concurrency, "until_idle": until_idle, "on_finding": on_finding,
                   "stalled_after": check_seconds(stalled_after, "stalled_after"),
                   "compile_key": checked_key(compile_key, compile_key_password)}  # fmt: skip
        self._backend.run_audit_worker(self, platforms, options)
