"""``Tokens``: the bearer tokens (``registry/_tokens.py``) of one registry database."""

from __future__ import annotations

import dataclasses
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
from jaxport.registry._event_log import EventLog
from jaxport.registry._models import TokenRow
from jaxport.registry._names import check_name
from jaxport.registry._tokens import (
    MAX_EXPIRES_IN,
    SCOPES,
    SECRET_PREFIX,
    NewToken,
    TokenInfo,
    secret_digest,
)

__all__ = ["Tokens"]


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
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
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
