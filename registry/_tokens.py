"""Bearer tokens of the registry server: made, listed, revoked and checked here.

A token's secret (``jxp_`` and 43 URL-safe characters: 256 random bits) is shown once, when it
is made; the database keeps its sha256 only (``tokens.secret_sha256``), so a copy of the
database gives no token. Scopes nest: ``admin`` ⊃ ``write`` ⊃ ``read`` (``admin``: gc, delete,
tokens, database upgrades; ``write``: push, alias moves, signing, audits; ``read``: the rest).
Name prefixes limit a token to the names that start with one of them (none: every name). A
token manages only the tokens within it (``TokenInfo.covers``: a scope no larger, prefixes that
start with one of its own): a prefix-limited admin cannot make, see or revoke a token that
reaches further than it does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import time
from collections.abc import Iterable, Sequence

from sqlalchemy import Engine, insert, select, update

from jaxport import (
    AuthenticationError,
    ConflictError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
)
from jaxport.registry import _db
from jaxport.registry._events import EventLog
from jaxport.registry._models import TokenRow
from jaxport.registry._names import check_name

__all__ = ["SCOPES", "NewToken", "TokenInfo", "Tokens", "secret_digest"]

#: Scopes from least to most: each includes those before it.
SCOPES = ("read", "write", "admin")
#: The longest ``expires_in``, in seconds: 100 years (a date every calendar can show).
MAX_EXPIRES_IN = 100 * 365 * 86400
_PREFIX = "jxp_"


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


class Tokens:
    """The tokens of one registry database (``Registry.tokens``)."""

    def __init__(self, engine: Engine, events: EventLog):
        self._engine = engine
        self._events = events

    def create(
        self,
        name: str,
        scope: str = "read",
        *,
        prefixes: Sequence[str] = (),
        expires_in: float | None = None,
        within: TokenInfo | None = None,
    ) -> NewToken:
        """Makes a token; its secret is in the result and nowhere else.

        Args:
            name: the token's name (the registry's name grammar), shown in the event log.
            scope: ``read``, ``write`` or ``admin`` (each includes the ones before it).
            prefixes: limit the token to names starting with one of these.
            expires_in: seconds until it expires, at most 100 years (None: never).
            within: the token that asks (the server's caller): the new token's scope and
                prefixes must be within its own (``TokenInfo.covers``), and it expires no
                later (a token about to expire makes no token that outlives it). None: no
                limit.

        Raises:
            InvalidNameError: a bad name, scope, prefix or ``expires_in``.
            PermissionDeniedError: the new token would reach beyond ``within``, or outlive
                it, or ``within`` has prefixes and ``name`` starts with none of them (token
                names are one namespace: a name taken by another team is never disclosed).
            ConflictError: a token with this name exists (revoked ones included).
        """
        check_name(name, "token name")
        if scope not in SCOPES:
            raise InvalidNameError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r:.40}")
        prefixes = tuple(_prefixes(prefixes))
        if within is not None and within.prefixes and not within.allows_name(name):
            # Token names are one namespace: a prefix-limited token names its tokens within
            # its prefixes, so a name taken elsewhere is never disclosed by a 409.
            mine = ", ".join(map(repr, within.prefixes))
            raise PermissionDeniedError(
                f"token {within.name!r} (prefixes {mine}) names its tokens within its prefixes: "
                f"e.g. {within.prefixes[0] + name!r:.80}"
            )
        if within is not None and not within.covers(scope, prefixes):
            mine = ", ".join(map(repr, within.prefixes))
            raise PermissionDeniedError(
                f"token {within.name!r} (scope {within.scope!r}, prefixes {mine}) can make only "
                "tokens of a scope no larger, each of whose prefixes starts with one of its own"
            )
        expires_at = None
        if expires_in is not None:
            if (
                isinstance(expires_in, bool)
                or not isinstance(expires_in, int | float)
                or not 0 < expires_in <= MAX_EXPIRES_IN  # NaN and infinity fail it too
            ):
                raise InvalidNameError(
                    f"expires_in must be seconds > 0 and at most {MAX_EXPIRES_IN} (100 years), "
                    f"got {expires_in!r:.40}"
                )
            expires_at = time.time() + float(expires_in)
        if (
            within is not None
            and within.expires_at is not None
            and (expires_at is None or expires_at > within.expires_at)
        ):
            raise PermissionDeniedError(
                f"token {within.name!r} expires in {within.expires_at - time.time():,.0f} s: it "
                "can make only tokens that expire by then (expires_in no larger)"
            )
        secret = _PREFIX + secrets.token_urlsafe(32)
        info = TokenInfo(name, scope, prefixes, time.time(), expires_at)
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            if conn.execute(select(TokenRow.id).where(TokenRow.name == name)).first():
                raise ConflictError(f"a token named {name!r} exists (names are never reused)")
            conn.execute(
                insert(TokenRow),
                {"name": name, "secret_sha256": secret_digest(secret), "scopes": scope,
                 "prefixes": " ".join(prefixes), "created_at": info.created_at,
                 "expires_at": expires_at},
            )  # fmt: skip
        self._events.record(
            "token-create", detail={"token": name, "scope": scope, "prefixes": list(prefixes),
                                    "expires_at": expires_at},
        )  # fmt: skip
        return NewToken(info, secret)

    def list(self, *, within: TokenInfo | None = None) -> list[TokenInfo]:
        """Every token (revoked and expired ones too), by name; no secrets. ``within``: only
        the tokens within that one (``TokenInfo.covers``)."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            rows = conn.execute(select(TokenRow.__table__).order_by(TokenRow.name))
            found = [_info(r) for r in rows]
        return [t for t in found if within is None or within.covers(t.scope, t.prefixes)]

    def revoke(self, name: str, *, within: TokenInfo | None = None) -> TokenInfo:
        """Revokes a token now (its requests get 401 from then on); revoking twice is a no-op.
        ``within``: a token outside that one (``TokenInfo.covers``) is as if it did not exist.

        Raises:
            NotFoundError: no token of that name (within ``within``).
        """
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            row = conn.execute(select(TokenRow.__table__).where(TokenRow.name == name)).first()
            if row is None or (
                within is not None and not within.covers(row.scopes, row.prefixes.split())
            ):
                raise NotFoundError(f"no token named {name!r:.80}")
            if row.revoked_at is not None:
                return _info(row)
            now = time.time()
            conn.execute(update(TokenRow).where(TokenRow.id == row.id).values(revoked_at=now))
        self._events.record("token-revoke", detail={"token": name})
        return dataclasses.replace(_info(row), revoked_at=now)

    def authenticate(self, secret: str | None) -> TokenInfo:
        """The token whose secret this is, if it is active.

        Raises:
            AuthenticationError: no secret, an unknown one, or a revoked or expired token
                (the message names the token, never the secret).
        """
        if not secret:
            raise AuthenticationError(
                "this registry server needs a bearer token (Authorization: Bearer; clients "
                "read it from $JAXPORT_TOKEN)"
            )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            row = conn.execute(
                select(TokenRow.__table__).where(TokenRow.secret_sha256 == secret_digest(secret))
            ).first()
        if row is None:
            raise AuthenticationError("unknown token")
        info = _info(row)
        if info.revoked_at is not None:
            raise AuthenticationError(f"token {info.name!r} was revoked")
        if info.expires_at is not None and info.expires_at <= time.time():
            raise AuthenticationError(f"token {info.name!r} has expired")
        return info


def _prefixes(prefixes: Iterable[str]) -> Iterable[str]:
    if isinstance(prefixes, str):
        raise InvalidNameError("prefixes must be a list of strings, not one string")
    for p in prefixes:
        if not isinstance(p, str) or not p or any(c.isspace() for c in p) or len(p) > 200:
            raise InvalidNameError(
                f"a name prefix must be 1-200 characters without spaces, got {p!r:.40}"
            )
        yield p


def _info(row: object) -> TokenInfo:
    r = row._mapping  # type: ignore[attr-defined]
    return TokenInfo(
        name=r["name"], scope=r["scopes"], prefixes=tuple(r["prefixes"].split()),
        created_at=r["created_at"], expires_at=r["expires_at"], revoked_at=r["revoked_at"],
    )  # fmt: skip
