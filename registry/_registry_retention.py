"""``Registry``'s retention: policies per name prefix, runs, restore (``registry/_retention.py``
holds the rules). A mixin of ``Registry`` (``registry/_registry.py``); the argument checks
here, the work in the backend (``registry/_backend.py``). Through a registry server every
call needs an ``admin`` token; a token limited to name prefixes reaches only policies and
names within them."""

from __future__ import annotations

import builtins

from jaxport.registry._backend import Backend
from jaxport.registry._names import check_name, check_version
from jaxport.registry._retention_types import (
    DEFAULT_RESTORE_PERIOD,
    RetentionPlan,
    RetentionPolicy,
    check_policy,
)
from jaxport.registry._types import Ref

__all__ = ["RegistryRetention"]


class RegistryRetention:
    """``Registry``'s retention methods (see ``Registry``)."""

    _backend: Backend

    def retention_policies(self) -> builtins.list[RetentionPolicy]:
        """Every retention policy, in prefix order (through a server: those within the
        token's prefixes)."""
        return self._backend.retention_policies()

    def set_retention_policy(
        self,
        prefix: str,
        *,
        keep_last: int | None = None,
        keep_younger_than: float | None = None,
        keep_ok_per_target: bool = True,
        restore_period: float = DEFAULT_RESTORE_PERIOD,
    ) -> RetentionPolicy:
        """Sets the retention policy of the names starting with ``prefix`` (replacing its
        previous one); a ``retention-policy`` event. Nothing is deleted until ``retain`` runs.

        Args:
            prefix: a name prefix (itself a valid name: ``team-a.``, ``vision``). A name
                follows the policy with the longest prefix it starts with.
            keep_last: keep each name's newest N versions (None: no such rule).
            keep_younger_than: keep versions pushed less than this many seconds ago.
            keep_ok_per_target: keep the newest version with a full ``ok`` audit for each
                (platform, device count, jax release inside the variant's window).
            restore_period: seconds a deleted version stays restorable (default 14 days).

        Aliased versions are always kept.

        Raises:
            InvalidNameError: a bad prefix, count, age or period (see ``RetentionPolicy``).
            PermissionDeniedError: through a server, a token without ``admin`` scope, or a
                prefix outside the token's prefixes.
        """
        policy = RetentionPolicy(
            prefix, keep_last, keep_younger_than, keep_ok_per_target, restore_period
        )
        check_policy(policy)
        self._backend.check_writable()
        return self._backend.set_retention_policy(policy)

    def remove_retention_policy(self, prefix: str) -> RetentionPolicy:
        """Removes the retention policy of ``prefix`` and returns it; a ``retention-policy``
        event.

        Raises:
            NotFoundError: no policy has that prefix.
            InvalidNameError: not a valid prefix.
            PermissionDeniedError: through a server, as ``set_retention_policy``.
        """
        check_name(prefix, "prefix")
        self._backend.check_writable()
        return self._backend.remove_retention_policy(prefix)

    def retain(self, prefix: str | None = None, *, dry_run: bool = False) -> RetentionPlan:
        """Applies the retention policies to the names starting with ``prefix`` (None: every
        name a policy covers): each version that no rule keeps is soft-deleted (hidden from
        every read; ``restore`` brings it back within its policy's ``restore_period``; then
        ``gc`` removes it and frees its blobs), one ``retain`` event each.

        Args:
            prefix: limit the run to these names (each follows its own policy).
            dry_run: only say what would be deleted and why, and what is kept and by which
                rule.

        Returns:
            A ``RetentionPlan``: the versions deleted (or that would be) and those kept, each
            with its rules.

        Raises:
            InvalidNameError: ``prefix`` is not a valid name prefix.
            PermissionDeniedError: through a server, a token without ``admin`` scope; a
                ``prefix`` outside the token's prefixes, or none for a prefix-limited token.
        """
        if prefix is not None:
            check_name(prefix, "prefix")
        if not dry_run:
            self._backend.check_writable()
        return self._backend.retain(prefix, bool(dry_run))

    def restore(self, name: str, version: int) -> Ref:
        """Brings back ``name:version``, which a retention run deleted, within its restore
        period; a ``restore`` event. Its aliases are not restored (none pointed at it).

        Returns:
            The version, as ``get`` returns it.

        Raises:
            NotFoundError: no such version (never pushed, or ``gc`` removed it).
            ConflictError: it is not deleted, or its restore period is over.
            InvalidNameError: a bad name or version.
            PermissionDeniedError: through a server, a token without ``admin`` scope, or a
                name outside the token's prefixes.
        """
        check_name(name)
        check_version(version)
        self._backend.check_writable()
        return self._backend.restore(name, version)
