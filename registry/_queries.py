"""Reading the registry: resolve, get, list, search, names, and the lookups behind them.

``resolve`` picks the variant ``pull`` returns: the newest version (or the one a reference
names) with a variant that runs on the platform and device count asked for (``_rules``); within
a version an exact device count beats a 1-device unsharded export.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, or_, select

from jaxport._errors import InvalidNameError, NotFoundError
from jaxport.registry import _db
from jaxport.registry._models import Alias, Model, Variant, Version, VersionExamples
from jaxport.registry._names import (
    Reference,
    check_count,
    check_name,
    check_text,
    check_version,
    normalize_platform,
    parse_reference,
)
from jaxport.registry._rules import devices_predicate, platform_predicate
from jaxport.registry._types import Ref, Rejection, Resolution, VariantInfo

__all__ = ["Queries", "check_limit", "live_names", "nothing_matches"]

_MAX_REJECTIONS = 100
_MAX_AMBIGUOUS = 5
#: Names a not-found message lists.
_LISTED_NAMES = 20


class Queries:
    """Read-only queries on one registry database."""

    def __init__(self, engine: Engine):
        self._engine = engine

    # -- whole answers ---------------------------------------------------------------------

    def get(self, reference: str) -> Ref:
        """The version a reference names (the newest for a bare name)."""
        ref = parse_reference(reference)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            name, version = self.locate(conn, ref)
            return ref_on(conn, name, version)

    def locate(self, conn: Connection, ref: Reference) -> tuple[str, int]:
        """``(name, version)`` of a reference; a bare name: its newest version."""
        if ref.digest_prefix is not None:
            variant = self.variant_by_digest(conn, ref.digest_prefix)
            return variant.name, variant.version
        assert ref.name is not None
        model_id = model_id_of(conn, ref.name)
        version = ref.version
        if ref.alias is not None:
            version = alias_version(conn, model_id, ref.name, ref.alias)
        if version is None:
            version = conn.execute(
                select(func.max(Version.version)).where(Version.model_id == model_id)
            ).scalar()
            if version is None:
                raise NotFoundError(f"{ref.name} has no versions")
        version_id_of(conn, model_id, ref.name, version)
        return ref.name, int(version)

    def variant_by_digest(self, conn: Connection, prefix: str) -> VariantInfo:
        """The variant whose digest starts with ``prefix`` (the oldest, if several versions
        hold the same archive).

        Raises:
            NotFoundError: none does.
            InvalidNameError: the prefix matches several archives.
        """
        rows = conn.execute(
            _variants_select()
            .where(Variant.digest >= prefix, Variant.digest < prefix + "g")
            .order_by(Variant.id)
            .limit(1000)
        ).all()
        digests = sorted({r.digest for r in rows})
        if not digests:
            raise NotFoundError(f"no archive has a digest starting with {prefix}")
        if len(digests) > 1:
            shown = ", ".join(d[: len(prefix) + 4] for d in digests[:_MAX_AMBIGUOUS])
            raise InvalidNameError(
                f"sha256:{prefix} matches {len(digests)} archives ({shown}, ...): give more digits"
            )
        return VariantInfo.from_row(rows[0].m_name, rows[0].v_number, rows[0])

    def page(self, name: str | None, *, limit: int, after: tuple[str, int] | None) -> list[Ref]:
        """Versions in ``(name, version)`` order, one page (keyset pagination)."""
        q = (
            select(Model.name, Version.version)
            .join(Version, Version.model_id == Model.id)
            .order_by(Model.name, Version.version)
            .limit(check_limit(limit))
        )
        if after is not None:
            a_name, a_version = _check_after(after)
            q = q.where(
                or_(Model.name > a_name, and_(Model.name == a_name, Version.version > a_version))
            )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            if name is not None:
                model_id_of(conn, name)  # NotFoundError for an unknown name
                q = q.where(Model.name == name)
            pairs = conn.execute(q).all()
            return [ref_on(conn, n, v) for n, v in pairs]

    def search(
        self, filters: dict[str, Any], *, limit: int, after: int | None
    ) -> list[VariantInfo]:
        """Variants matching every filter given, oldest first (see ``Registry.search``)."""
        q = _variants_select().order_by(Variant.id).limit(check_limit(limit))
        if filters.get("platform") is not None:
            q = q.where(platform_predicate(normalize_platform(filters["platform"])))
        if filters.get("nr_devices") is not None:
            q = q.where(devices_predicate(_check_count(filters["nr_devices"])))
        if (prefix := filters.get("jax_version")) is not None:
            check_text(prefix, "jax_version")
            q = q.where(
                or_(
                    Variant.jax_version == prefix,
                    Variant.jax_version.startswith(f"{prefix}.", autoescape=True),
                )
            )
        if (cc := filters.get("calling_convention_version")) is not None:
            q = q.where(Variant.calling_convention_version == check_count(cc, "calling convention"))
        if (fun_name := filters.get("fun_name")) is not None:
            q = q.where(Variant.fun_name == check_text(fun_name, "fun_name"))
        if (poly := filters.get("shape_polymorphic")) is not None:
            if not isinstance(poly, bool):
                raise InvalidNameError(f"shape_polymorphic must be a bool, got {poly!r:.40}")
            q = q.where(Variant.shape_polymorphic == poly)
        if after is not None:
            q = q.where(Variant.id > check_count(after, "after (a variant_id)", 2**63 - 1))
        with _db.translating_db_errors(), self._engine.connect() as conn:
            if (name := filters.get("name")) is not None:
                model_id_of(conn, name)  # NotFoundError for an unknown name
                q = q.where(Model.name == name)
            return [VariantInfo.from_row(r.m_name, r.v_number, r) for r in conn.execute(q)]

    def names(self) -> list[str]:
        """Every name that has a version, sorted (a deleted name is not listed)."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return live_names(conn)

    def resolve(self, reference: str, platform: str | None, nr_devices: int | None) -> Resolution:
        """The variant ``pull`` would return, and why every other candidate was rejected."""
        ref = parse_reference(reference)
        if nr_devices is not None:
            nr_devices = _check_count(nr_devices)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            if ref.digest_prefix is not None:
                variant = self.variant_by_digest(conn, ref.digest_prefix)
                reason = variant.runs_on(platform, nr_devices)
                if reason is None:
                    return Resolution(variant.name, platform, nr_devices, variant, ())
                refused = (Rejection(variant, reason),)
                return Resolution(variant.name, platform, nr_devices, None, refused)
            assert ref.name is not None
            model_id = model_id_of(conn, ref.name)
            version = ref.version
            if ref.alias is not None:
                version = alias_version(conn, model_id, ref.name, ref.alias)
            if version is not None:
                version_id_of(conn, model_id, ref.name, version)
            args = (conn, model_id, ref.name, version, platform, nr_devices)
            chosen = _best_variant(*args)
            rejected = _rejections(*args, chosen)
        return Resolution(ref.name, platform, nr_devices, chosen, tuple(rejected))

    def has_variant(self, variant_id: int) -> bool:
        """Whether the variant still exists (a delete may have removed it meanwhile)."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            found = conn.execute(select(Variant.id).where(Variant.id == variant_id)).first()
            return found is not None

    def names_holding(self, digest: str) -> list[str]:
        """The names with a version that holds the archive ``digest`` (exactly), sorted."""
        q = (
            select(Model.name)
            .join(Version, Version.model_id == Model.id)
            .join(Variant, Variant.version_id == Version.id)
            .where(Variant.digest == digest)
            .distinct()
            .order_by(Model.name)
        )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return list(conn.execute(q).scalars())

    def model_variant(self, digest: str) -> VariantInfo | None:
        """The (oldest) model variant whose archive has exactly this digest, if any."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            row = conn.execute(
                _variants_select()
                .where(Variant.digest == digest, Variant.kind == "model")
                .order_by(Variant.id)
                .limit(1)
            ).first()
        return None if row is None else VariantInfo.from_row(row.m_name, row.v_number, row)

    def examples_digest(self, name: str, version: int) -> str | None:
        """The digest of a version's golden examples blob, if it has one."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return conn.execute(
                select(VersionExamples.digest)
                .join(Version, Version.id == VersionExamples.version_id)
                .join(Model, Model.id == Version.model_id)
                .where(Model.name == name, Version.version == version)
            ).scalar_one_or_none()


# -- lookups shared with the other registry modules -------------------------------------------


def _check_after(after: object) -> tuple[str, int]:
    """``after`` if it is a ``(name, version)`` pair of a valid name and version.

    Raises:
        InvalidNameError: anything else.
    """
    if not isinstance(after, tuple | list) or len(after) != 2:
        raise InvalidNameError(f"after must be a (name, version) pair, got {after!r:.80}")
    return check_name(after[0]), check_version(after[1])


def model_id_of(conn: Connection, name: str, *, lock: bool = False) -> int:
    """The id of ``name``, a name with at least one version; ``lock``: FOR UPDATE
    (PostgreSQL), which queues writers of a name.

    A deleted name keeps its row (its version numbers are never handed out again) but is
    gone for every reader: it is not found, and no message lists it.

    Raises:
        NotFoundError: no such name, or every version of it was deleted (the message says
            which names are close, and lists some that exist).
    """
    q = select(Model.id).where(Model.name == check_name(name))
    model_id = conn.execute(q.with_for_update() if lock else q).scalar_one_or_none()
    if model_id is not None and _has_versions(conn, int(model_id)):
        return int(model_id)
    known = live_names(conn)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    listed = ", ".join(known[:_LISTED_NAMES]) or "none"
    more = ", ..." if len(known) > _LISTED_NAMES else ""
    raise NotFoundError(f"no artifact named {name!r}; {hint}names: {listed}{more}")


def _has_versions(conn: Connection, model_id: int) -> bool:
    found = conn.execute(select(Version.id).where(Version.model_id == model_id).limit(1))
    return found.first() is not None


def live_names(conn: Connection) -> list[str]:
    """Every name with at least one version, sorted."""
    live = select(Version.id).where(Version.model_id == Model.id).exists()
    return list(conn.execute(select(Model.name).where(live).order_by(Model.name)).scalars())


def version_id_of(conn: Connection, model_id: int, name: str, version: int) -> int:
    """The id of ``name:version``.

    Raises:
        NotFoundError: no such version (the message lists the versions).
    """
    version_id = conn.execute(
        select(Version.id).where(
            Version.model_id == model_id, Version.version == check_version(version)
        )
    ).scalar_one_or_none()
    if version_id is None:
        versions = conn.execute(
            select(Version.version).where(Version.model_id == model_id).order_by(Version.version)
        ).scalars()
        listed = ", ".join(map(str, versions)) or "none"
        raise NotFoundError(f"{name} has no version {version}; versions: {listed}")
    return int(version_id)


def alias_version(conn: Connection, model_id: int, name: str, alias: str) -> int:
    """The version ``name@alias`` points at.

    Raises:
        NotFoundError: no such alias (the message lists the aliases).
    """
    version = conn.execute(
        select(Alias.version).where(Alias.model_id == model_id, Alias.alias == alias)
    ).scalar_one_or_none()
    if version is None:
        known = conn.execute(select(Alias.alias).where(Alias.model_id == model_id)).scalars()
        raise NotFoundError(
            f"{name} has no alias {alias!r}; aliases: {', '.join(sorted(known)) or 'none'}"
        )
    return int(version)


def ref_on(conn: Connection, name: str, version: int) -> Ref:
    """The ``Ref`` of ``name:version`` (which exists)."""
    row = conn.execute(
        select(Version.metadata_json, Version.created_at)
        .join(Model, Model.id == Version.model_id)
        .where(Model.name == name, Version.version == version)
    ).one()
    rows = conn.execute(
        _variants_select()
        .where(Model.name == name, Version.version == version)
        .order_by(Variant.id)
    )
    variants = tuple(VariantInfo.from_row(name, version, r) for r in rows)
    return Ref(name, version, variants, json.loads(row.metadata_json), row.created_at)


def nothing_matches(r: Resolution) -> str:
    """The NotFoundError message when ``resolve`` chose nothing: what exists instead."""
    wanted = f"platform {r.platform or 'any'}"
    if r.nr_devices is not None:
        wanted += f" with {r.nr_devices} devices"
    versions = sorted({x.variant.version for x in r.rejected})
    platforms = sorted({p for x in r.rejected for p in x.variant.platforms})
    devices = sorted({x.variant.nr_devices for x in r.rejected})
    return (
        f"no variant of {r.name!r} runs on {wanted}; it has versions "
        f"{', '.join(map(str, versions)) or 'none'}, "
        f"platforms {', '.join(platforms) or 'none'}, "
        f"device counts {', '.join(map(str, devices)) or 'none'}"
    )


def _variants_select() -> Any:
    return (
        select(Variant.__table__, Version.version.label("v_number"), Model.name.label("m_name"))
        .join(Version, Variant.version_id == Version.id)
        .join(Model, Model.id == Version.model_id)
    )


def _candidates(model_id: int, version: int | None) -> Any:
    q = _variants_select().where(Version.model_id == model_id)
    return q if version is None else q.where(Version.version == version)


def _best_variant(
    conn: Connection,
    model_id: int,
    name: str,
    version: int | None,
    platform: str | None,
    nr_devices: int | None,
) -> VariantInfo | None:
    q = _candidates(model_id, version)
    if platform is not None:
        q = q.where(platform_predicate(platform))
    order: list[Any] = [Version.version.desc()]
    if nr_devices is not None:
        q = q.where(devices_predicate(nr_devices))
        order.append((Variant.nr_devices == nr_devices).desc())
    row = conn.execute(q.order_by(*order, Variant.id).limit(1)).first()
    return None if row is None else VariantInfo.from_row(name, row.v_number, row)


def _rejections(
    conn: Connection,
    model_id: int,
    name: str,
    version: int | None,
    platform: str | None,
    nr_devices: int | None,
    chosen: VariantInfo | None,
) -> list[Rejection]:
    q = _candidates(model_id, version)
    if chosen is not None:
        q = q.where(Version.version >= chosen.version, Variant.id != chosen.variant_id)
    rows = conn.execute(q.order_by(Version.version.desc(), Variant.id).limit(_MAX_REJECTIONS))
    out = []
    for row in rows:
        info = VariantInfo.from_row(name, row.v_number, row)
        reason = info.runs_on(platform, nr_devices)
        out.append(
            Rejection(info, reason or "an earlier variant of the same version matched first")
        )
    return out


def check_limit(limit: object) -> int:
    """A page size: an int in 1 .. 1,000,000 (``InvalidNameError`` otherwise)."""
    return check_count(limit, "limit", 1_000_000)


def _check_count(n: object) -> int:
    return check_count(n, "a device count")
