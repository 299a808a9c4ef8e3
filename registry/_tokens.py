"""Bearer tokens of the registry server: made, listed, revoked and checked here.

A token's secret (``jxp_`` and 43 URL-safe characters: 256 random bits) is shown once, when it
is made; the database keeps its sha256 only (``tokens.secret_sha256``), so a copy of the
database gives no token. Scopes nest: ``admin`` ⊃ ``write`` ⊃ ``read`` (``admin``: gc, delete,
tokens, database upgrades; ``write``: push, alias moves, signing, audits; ``read``: the rest).
Name prefixes limit a token to the names that start with one of them (none: every name). A
token manages only the tokens within it (``TokenInfo.covers``: a scope no larger, prefixes that
start with one of its own): a prefix-limited admin cannot make, see or revoke a token that
reaches further than it does. The tokens of a database are ``registry/_token_store.py``; this
module imports no database library.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence

from jaxport import (
    PermissionDeniedError,
)

__all__ = ["MAX_EXPIRES_IN", "SCOPES", "SECRET_PREFIX", "NewToken", "TokenInfo", "secret_digest"]

#: Scopes from least to most: each includes those before it.
SCOPES = ("read", "write", "admin")
#: The longest ``expires_in``, in seconds: 100 years (a date every calendar can show).
MAX_EXPIRES_IN = 100 * 365 * 86400
#: What every secret starts with.
SECRET_PREFIX = "jxp_"


def secret_digest(secret: str) -> str:
    """The sha256 (hex) of a token's secret: what the database stores."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclasses.dataclass(frozen=True)
class TokenInfo:
    """A token as stored: ``name``, ``scope`` (read, write or admin), name ``prefixes`` (empty:
    every name), times in unix seconds (``expires_at`` / ``revoked_at`` None: never)."""

    name: str
    scope: str
    prefixes: tuple[str, ...]
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        """Neither revoked nor expired now."""
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > time.time()
        )

    def allows_scope(self, scope: str) -> bool:
        """Whether this token's scope includes ``scope``."""
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def allows_name(self, name: str) -> bool:
        """Whether ``name`` starts with one of the prefixes (always, without prefixes)."""
        return not self.prefixes or any(name.startswith(p) for p in self.prefixes)

    def covers(self, scope: str, prefixes: Sequence[str]) -> bool:
        """Whether a token of ``scope`` and name ``prefixes`` is within this one: its scope is
        no larger and every name it may use this token may use too (each of its prefixes
        starts with one of this token's; no prefixes, every name, only under a token without
        prefixes). The rule of what a prefix-limited admin manages (``server/_api_write.py``).
        """
        if scope not in SCOPES or not self.allows_scope(scope):
            return False
        return not self.prefixes or (bool(prefixes) and all(map(self.allows_name, prefixes)))

    def check(self, scope: str, name: str | None = None) -> None:
        """Refuses a request that needs ``scope`` (on ``name``) beyond what the token allows.

        Raises:
            PermissionDeniedError: the scope is too small (``.needed`` names the scope), or
                ``name`` is outside the token's prefixes.
        """
        if not self.allows_scope(scope):
            raise PermissionDeniedError(
                f"token {self.name!r} has scope {self.scope!r}; this needs {scope!r}",
                needed=scope,
            )
        if name is not None and not self.allows_name(name):
            raise PermissionDeniedError(
                f"token {self.name!r} is limited to names starting with "
                f"{', '.join(map(repr, self.prefixes))}; {name!r} is not one"
            )


@dataclasses.dataclass(frozen=True)
class NewToken:
    """A token just made: its ``info`` and its ``secret``, shown this once (never in ``repr``)."""

    info: TokenInfo
    secret: str = dataclasses.field(repr=False)
