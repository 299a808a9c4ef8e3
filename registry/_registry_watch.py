"""``Registry``'s jax-release watcher and forecast (issue 26 §2): argument checks here, the work
in the backend (``registry/_releases.py``, ``registry/_forecast.py`` on a database; the server's
``/api/v1/watch`` and ``/api/v1/forecast`` through it). A mixin of ``Registry``."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from jaxport import InvalidNameError
from jaxport.registry._backend import Backend
from jaxport.registry._names import check_seconds

if TYPE_CHECKING:
    from jaxport.registry._watch_types import VariantForecast, WatchReport

__all__ = ["RegistryWatch"]


class RegistryWatch:
    """``Registry``'s watcher (see ``Registry``)."""

    _backend: Backend

    def watch_jax(
        self,
        *,
        index_url: str | None = None,
        dry_run: bool = False,
        prereleases: bool = False,
        enqueue: bool = True,
        timeout: float = 120.0,
    ) -> WatchReport:
        """Looks for jax and jaxlib releases newer than the registry has seen and says what
        each new jax release does to every variant (one shot: run it from cron, or let
        ``run_audit_worker(watch=...)`` run it periodically).

        The package index is the one pip is configured with (``$PIP_INDEX_URL``, else ``pip
        config``'s ``index-url``, else https://pypi.org/simple/), read through its JSON simple
        API (PEP 691); pre-releases and yanked releases are left out. When nothing was seen
        yet, only the newest release counts as new. For each new jax release: a static audit
        of every variant (the recorded facts against the release's projected capabilities,
        and jax's 6-month window against its upload day: ``jaxport.audit._watch``), full
        audits enqueued per platform in that release's environment (PostgreSQL with the
        audit queue), the release recorded as seen and one ``jax-release`` event summarising
        how many variants stay ok, expire (per window end date), are refused statically and
        need rescue. Through a registry server the server watches, with its own index
        configuration (an admin token without name prefixes), and its webhooks receive the
        event.

        Args:
            index_url: the index's root URL (``https://host/simple/``), instead of pip's; not
                through a server.
            dry_run: judge and report only: nothing recorded, enqueued or logged.
            prereleases: count pre- and dev-releases too.
            enqueue: enqueue the full audits (where the registry has the queue).
            timeout: seconds each enqueued audit may take (as ``enqueue_audits``).

        Returns:
            The index read, the new releases, a ``ReleaseSummary`` per new jax release.

        Raises:
            AuditError: the index cannot be reached or answered outside PEP 691 or its limits.
            InvalidNameError: a ``timeout`` that is not > 0, or an empty ``index_url``.
            UnsupportedFeatureError: ``index_url`` through a registry server.
            PermissionDeniedError: through a server, a token that is not an unprefixed admin.
            RegistryError: the database failed.
        """
        if not dry_run:
            self._backend.check_writable()
        if index_url is not None and not isinstance(index_url, str):
            raise InvalidNameError(f"index_url must be a str, got {type(index_url).__name__}")
        if index_url is not None and not index_url.strip():
            raise InvalidNameError("index_url is empty: give an index's URL, or None for pip's")
        options = {
            "index": index_url,
            "dry_run": bool(dry_run),
            "prereleases": bool(prereleases),
            "enqueue": bool(enqueue),
            "timeout": check_seconds(timeout, "timeout"),
        }
        return self._backend.watch_jax(options)

    def forecast(self, reference: str | None = None) -> builtins.list[VariantForecast]:
        """Per variant: the jax releases full audits found it ``ok`` under, when jax's 6-month
        window for it ends, and what the newest jax release the watcher has seen says of it
        (``ok``: nothing refuses it, ``expires``, ``refused``; ``""``: no release seen).

        Args:
            reference: one version (``NAME:V``, ``NAME@ALIAS``, a digest), all of a name's
                (``NAME``), or None: every version (through a server: those its token sees).

        Raises:
            NotFoundError: no such name, version or alias.
            InvalidNameError: a malformed reference.
        """
        return self._backend.forecast(reference)
