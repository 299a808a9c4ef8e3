"""Reading the registry: resolve, get, list, search, names, and the lookups behind them.

``resolve`` picks the variant ``pull`` returns: the newest version (or the one a reference
names) with a variant that runs on the platform and device count asked for (``_rules``); within
a version an exact device count beats a 1-device unsharded export.

Each answer is one SQL statement (``tests/test_sql_counts.py`` holds the counts), and each
page of ``list`` and ``search`` costs O(log n) in the registry's size, an index serving its
WHERE and ORDER BY:

- ``get``, ``resolve``: the version (or the newest ones) and its variants, joined from the name
  (and alias) through the unique indexes; ``resolve`` picks in Python, by ``_rules``' reasons,
  among the variants of the newest ``_WINDOW_VERSIONS`` versions, and asks again in SQL (three
  more statements) only when the answer lies past them. A reference that names nothing takes
  more statements, to say why.
- ``list``: a page of versions in ``(name, version)`` order, their variants joined; the key
  ``after`` is two index ranges (the rest of its name, then the names after it).
- ``search``: one filter drives, through its index, in ``variant_id`` order (``_search``);
  every other filter is checked on the rows it yields.
- An unknown name is told apart from an empty answer only when the answer is empty.
- A version a retention run soft-deleted is hidden from all of them (``_selects.live``) until
  it is restored (``registry/_retention.py``).
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, func, literal, select, union_all

from jaxport import InvalidNameError, NotFoundError
from jaxport.registry import _db
from jaxport.registry._models import (
    AliasRow,
    ExamplesRow,
    NameRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._names import (
    Reference,
    check_count,
    check_name,
    check_version,
    parse_reference,
)
from jaxport.registry._rules import devices_predicate, platform_predicate
from jaxport.registry._search import SearchFilters, search_statement
from jaxport.registry._selects import live, model_id_select, variants_select
from jaxport.registry._types import Ref, Rejection, Resolution, VariantInfo

__all__ = ["Queries", "check_limit", "live_names"]

_MAX_REJECTIONS = 100
#: Variants ``resolve`` reads at once, at most (the rejections it lists, and the one it
#: chooses), of the newest ``_WINDOW_VERSIONS`` versions: enough where the newest versions have
#: a variant that runs; past them, ``resolve`` asks again.
_WINDOW = _MAX_REJECTIONS + 1
_WINDOW_VERSIONS = 10
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
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            if ref.digest_prefix is not None:
                variant = self.variant_by_digest(conn, ref.digest_prefix)
                return ref_on(conn, variant.name, variant.version)
            found = _refs(conn.execute(_with_variants(_version_of(ref))))
            if found:
                return found[0]
            name, version = self.locate(conn, ref)  # NotFoundError, saying what is missing
            return ref_on(conn, name, version)

    def locate(self, conn: Connection, ref: Reference) -> tuple[str, int]:
        """``(name, version)`` of a reference; a bare name: its newest version.

        Raises:
            NotFoundError: no such name, alias, version or digest (the message lists what
                exists).
        """
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
                select(func.max(VersionRow.version)).where(VersionRow.model_id == model_id, live())
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
            variants_select()
            .where(VariantRow.digest >= prefix, VariantRow.digest < prefix + "g")
            .order_by(VariantRow.id)
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
        """Versions in ``(name, version)`` order, one page (keyset pagination), in one
        statement.

        Raises:
            NotFoundError: ``name`` does not exist (or has no versions).
            InvalidNameError: a bad limit, or ``after`` is not a (name, version) pair.
        """
        size = check_limit(limit)
        if after is None:
            page = _in_order(_versions(name), name).limit(size)
        else:
            page = _after(name, *_check_after(after), size)
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            refs = _refs(conn.execute(_with_variants(page)))
            if not refs and name is not None:
                model_id_of(conn, name)  # NotFoundError for an unknown name
            return refs

    def search(
        self, filters: dict[str, Any], *, limit: int, after: int | None
    ) -> list[VariantInfo]:
        """Variants matching every filter given, oldest first (see ``Registry.search``), in
        one statement (``_search``: which filter drives it, through which index)."""
        size = check_limit(limit)
        checked = SearchFilters.check(filters)
        if after is not None:
            after = check_count(after, "after (a variant_id)", 2**63 - 1)
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            rows = conn.execute(*search_statement(checked, size, after, conn.dialect.name))
            found = [VariantInfo.from_row(r.m_name, r.v_number, r) for r in rows]
            if not found and checked.name is not None:
                model_id_of(conn, checked.name)  # NotFoundError for an unknown name
            return found

    def names(self) -> list[str]:
        """Every name that has a version, sorted (a deleted name is not listed)."""
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            return live_names(conn)

    def resolve(self, reference: str, platform: str | None, nr_devices: int | None) -> Resolution:
        """The variant ``pull`` would return, and why every other candidate was rejected."""
        ref = parse_reference(reference)
        if nr_devices is not None:
            nr_devices = _check_count(nr_devices)
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            if ref.digest_prefix is not None:
                variant = self.variant_by_digest(conn, ref.digest_prefix)
                reason = variant.runs_on(platform, nr_devices)
                if reason is None:
                    return Resolution(variant.name, platform, nr_devices, variant, ())
                refused = (Rejection(variant, reason),)
                return Resolution(variant.name, platform, nr_devices, None, refused)
            assert ref.name is not None
            window = conn.execute(_window(ref)).all()
            picked = _pick(ref.name, window, platform, nr_devices)
            if picked is not None:
                return Resolution(ref.name, platform, nr_devices, *picked)
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
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            found = conn.execute(select(VariantRow.id).where(VariantRow.id == variant_id)).first()
            return found is not None

    def names_holding(self, digest: str) -> list[str]:
        """The names with a version that holds the archive ``digest`` (exactly), sorted."""
        q = (
            select(NameRow.name)
            .join(VersionRow, VersionRow.model_id == NameRow.id)
            .join(VariantRow, VariantRow.version_id == VersionRow.id)
            .where(VariantRow.digest == digest, live())
            .distinct()
            .order_by(NameRow.name)
        )
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            return list(conn.execute(q).scalars())

    def model_variant(self, digest: str) -> VariantInfo | None:
        """The (oldest) model variant whose archive has exactly this digest, if any."""
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            row = conn.execute(
                variants_select()
                .where(VariantRow.digest == digest, VariantRow.kind == "model")
                .order_by(VariantRow.id)
                .limit(1)
            ).first()
        return None if row is None else VariantInfo.from_row(row.m_name, row.v_number, row)

    def examples_digest(self, name: str, version: int) -> str | None:
        """The digest of a version's golden examples blob, if it has one."""
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            return conn.execute(
                select(ExamplesRow.digest)
                .join(VersionRow, VersionRow.id == ExamplesRow.version_id)
                .join(NameRow, NameRow.id == VersionRow.model_id)
                .where(NameRow.name == name, VersionRow.version == version, live())
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
    """The id of ``name``, a name with at least one version (one statement); ``lock``: FOR
    UPDATE (PostgreSQL), which queues writers of a name.

    A deleted name keeps its row (its version numbers are never handed out again) but is
    gone for every reader: it is not found, and no message lists it.

    Raises:
        NotFoundError: no such name, or every version of it was deleted (the message says
            which names are close, and lists some that exist).
    """
    live_ = select(VersionRow.id).where(VersionRow.model_id == NameRow.id, live()).exists()
    q = select(NameRow.id, live_.label("live")).where(NameRow.name == check_name(name))
    row = conn.execute(q.with_for_update(of=NameRow) if lock else q).one_or_none()
    if row is not None and row.live:
        return int(row.id)
    known = live_names(conn)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    listed = ", ".join(known[:_LISTED_NAMES]) or "none"
    more = ", ..." if len(known) > _LISTED_NAMES else ""
    raise NotFoundError(f"no artifact named {name!r}; {hint}names: {listed}{more}")


def live_names(conn: Connection) -> list[str]:
    """Every name with at least one (``live``) version, sorted."""
    any_live = select(VersionRow.id).where(VersionRow.model_id == NameRow.id, live()).exists()
    return list(conn.execute(select(NameRow.name).where(any_live).order_by(NameRow.name)).scalars())


def version_id_of(conn: Connection, model_id: int, name: str, version: int) -> int:
    """The id of ``name:version``.

    Raises:
        NotFoundError: no such version (the message lists the versions).
    """
    version_id = conn.execute(
        select(VersionRow.id).where(
            VersionRow.model_id == model_id, VersionRow.version == check_version(version), live()
        )
    ).scalar_one_or_none()
    if version_id is None:
        versions = conn.execute(
            select(VersionRow.version)
            .where(VersionRow.model_id == model_id, live())
            .order_by(VersionRow.version)
        ).scalars()
        listed = ", ".join(map(str, versions)) or "none"
        why = _deleted_note(conn, model_id, name, version)
        raise NotFoundError(f"{name} has no version {version}{why}; versions: {listed}")
    return int(version_id)


def _deleted_note(conn: Connection, model_id: int, name: str, version: int) -> str:
    """``: a retention run deleted it ...`` where ``name:version`` is soft-deleted (and how to
    bring it back while it can be), else ``""``."""
    import datetime
    import time

    until = conn.execute(
        select(VersionRow.restorable_until).where(
            VersionRow.model_id == model_id,
            VersionRow.version == version,
            VersionRow.deleted_at.is_not(None),
        )
    ).first()
    if until is None:
        return ""
    if until[0] is None or until[0] < time.time():
        return ": a retention run deleted it and its restore period is over"
    day = datetime.datetime.fromtimestamp(until[0], tz=datetime.UTC).strftime("%Y-%m-%d %H:%M")
    return (
        f": a retention run deleted it, restorable until {day} UTC (use Registry.restore or "
        f"`jaxport restore {name}:{version}`)"
    )


def alias_version(conn: Connection, model_id: int, name: str, alias: str) -> int:
    """The version ``name@alias`` points at.

    Raises:
        NotFoundError: no such alias (the message lists the aliases).
    """
    version = conn.execute(
        select(AliasRow.version).where(AliasRow.model_id == model_id, AliasRow.alias == alias)
    ).scalar_one_or_none()
    if version is None:
        known = conn.execute(select(AliasRow.alias).where(AliasRow.model_id == model_id)).scalars()
        raise NotFoundError(
            f"{name} has no alias {alias!r}; aliases: {', '.join(sorted(known)) or 'none'}"
        )
    return int(version)


def ref_on(conn: Connection, name: str, version: int) -> Ref:
    """The ``Ref`` of ``name:version`` (which exists), in one statement."""
    versions = _versions(name).where(VersionRow.version == version)
    (ref,) = _refs(conn.execute(_with_variants(versions)))
    return ref


def _versions(name: str | None = None, *conditions: Any) -> Any:
    """Versions with their names, labelled as ``_with_variants`` reads them: every name's, or
    only ``name``'s (if ``conditions`` on its ``models`` row hold). Only columns that the
    indexes hold, so that SQLite walks them in order rather than sort the table."""
    columns = (VersionRow.id.label("v_id"), VersionRow.version.label("v_number"))
    if name is None:
        named = select(NameRow.name.label("m_name"), *columns)
        return named.join(NameRow, NameRow.id == VersionRow.model_id).where(live(), *conditions)
    m_name = literal(name, NameRow.name.type).label("m_name")
    model_id = model_id_select(name, *conditions)
    return select(m_name, *columns).where(VersionRow.model_id == model_id, live())


def _in_order(versions: Any, name: str | None) -> Any:
    """``_versions(name)`` in ``(name, version)`` order, by the columns that have indexes
    (SQLite sorts anew for the label of a constant name)."""
    if name is None:
        return versions.order_by(NameRow.name, VersionRow.version)
    return versions.order_by(VersionRow.version)


def _aliased(name: str, alias: str) -> Any:
    """The version ``name@alias`` points at, as a scalar subquery."""
    return (
        select(AliasRow.version)
        .where(AliasRow.model_id == model_id_select(name), AliasRow.alias == alias)
        .scalar_subquery()
    )


def _version_of(ref: Reference) -> Any:
    """The version a name, ``name:N`` or ``name@alias`` reference names (a bare name: its
    newest), as ``_versions`` rows."""
    assert ref.name is not None
    q = _versions(ref.name)
    if ref.alias is not None:
        q = q.where(VersionRow.version == _aliased(ref.name, ref.alias))
    elif ref.version is not None:
        q = q.where(VersionRow.version == ref.version)
    return q.order_by(VersionRow.version.desc()).limit(1)


def _after(name: str | None, after_name: str, after_version: int, size: int) -> Any:
    """The ``size`` versions after ``(after_name, after_version)`` (only ``name``'s, if
    given): the rest of ``after_name`` and the names after it, two ranges that each have an
    index (an OR of the two would have none)."""
    later = _in_order(_versions(name, NameRow.name > after_name), name)
    parts = [select(later.limit(size).subquery())]
    if name is None or name == after_name:
        same = _in_order(
            _versions(after_name).where(VersionRow.version > after_version), after_name
        )
        parts.append(select(same.limit(size).subquery()))
    both = union_all(*parts).subquery()
    return select(both).order_by(both.c.m_name, both.c.v_number).limit(size)


def _with_variants(versions: Any) -> Any:
    """``versions`` (``_versions`` rows) with their metadata and variants, in ``(name,
    version, variant)`` order; a version without variants gives one row with a NULL ``id``."""
    page = versions.subquery("page")
    return (
        select(
            page,
            VersionRow.metadata_json.label("v_metadata_json"),
            VersionRow.created_at.label("v_created_at"),
            VariantRow.__table__,
        )
        .select_from(
            page.join(VersionRow, VersionRow.id == page.c.v_id).outerjoin(
                VariantRow, VariantRow.version_id == page.c.v_id
            )
        )
        .order_by(page.c.m_name, page.c.v_number, VariantRow.id)
    )


def _refs(rows: Iterable[Any]) -> list[Ref]:
    """``Ref``s of ``_with_variants`` rows."""
    refs = []
    for _, group in itertools.groupby(rows, key=lambda r: r.v_id):
        first, *rest = group
        name, version = first.m_name, first.v_number
        variants = tuple(
            VariantInfo.from_row(name, version, r) for r in (first, *rest) if r.id is not None
        )
        metadata = json.loads(first.v_metadata_json)
        refs.append(Ref(name, version, variants, metadata, first.v_created_at))
    return refs


def _window(ref: Reference) -> Any:
    """The first ``_WINDOW`` candidates of ``resolve`` in its order (newest version first,
    then by id) among the variants of the newest ``_WINDOW_VERSIONS`` versions that the
    reference names (or of the one it names); a version without variants gives one row with
    a NULL ``id``, so every version read has a row."""
    assert ref.name is not None
    versions = select(VersionRow.id, VersionRow.version).where(
        VersionRow.model_id == model_id_select(ref.name), live()
    )
    if ref.alias is not None:
        versions = versions.where(VersionRow.version == _aliased(ref.name, ref.alias))
    elif ref.version is not None:
        versions = versions.where(VersionRow.version == ref.version)
    newest = versions.order_by(VersionRow.version.desc()).limit(_WINDOW_VERSIONS).subquery()
    return (
        select(VariantRow.__table__, newest.c.version.label("v_number"))
        .select_from(newest.outerjoin(VariantRow, VariantRow.version_id == newest.c.id))
        .order_by(newest.c.version.desc(), VariantRow.id)
        .limit(_WINDOW)
    )


def _pick(
    name: str, window: Sequence[Any], platform: str | None, nr_devices: int | None
) -> tuple[VariantInfo | None, tuple[Rejection, ...]] | None:
    """``(chosen, rejected)`` as ``_best_variant`` and ``_rejections`` would answer, from the
    ``_window`` rows alone; None where they do not tell (nothing named; the answer may lie
    past the window)."""
    if not window:
        return None
    cut = len(window) == _WINDOW  # rows past the window's last may be of its last version
    every_version = len({r.v_number for r in window}) < _WINDOW_VERSIONS
    rows = [r for r in window if r.id is not None]
    reasons = [VariantInfo.row_runs_on(r, platform, nr_devices) for r in rows]
    running = [r for r, reason in zip(rows, reasons, strict=True) if reason is None]
    chosen = None
    if running:
        newest = [r for r in running if r.v_number == running[0].v_number]
        exact = [r for r in newest if r.nr_devices == nr_devices]
        chosen = (exact or newest)[0]
        if cut and window[-1].v_number == chosen.v_number:
            return None  # the chosen version's variants may go on past the window
    elif cut or not every_version:
        return None  # an older version may have one that runs
    rejected = tuple(
        Rejection(VariantInfo.from_row(name, r.v_number, r),
                  reason or "an earlier variant of the same version matched first")
        for r, reason in zip(rows, reasons, strict=True)
        if chosen is None or (r.v_number >= chosen.v_number and r is not chosen)
    )[:_MAX_REJECTIONS]  # fmt: skip
    found = None if chosen is None else VariantInfo.from_row(name, chosen.v_number, chosen)
    return found, rejected


def _candidates(model_id: int, version: int | None) -> Any:
    q = variants_select().where(VersionRow.model_id == model_id)
    return q if version is None else q.where(VersionRow.version == version)


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
    order: list[Any] = [VersionRow.version.desc()]
    if nr_devices is not None:
        q = q.where(devices_predicate(nr_devices))
        order.append((VariantRow.nr_devices == nr_devices).desc())
    row = conn.execute(q.order_by(*order, VariantRow.id).limit(1)).first()
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
        q = q.where(VersionRow.version >= chosen.version, VariantRow.id != chosen.variant_id)
    rows = conn.execute(q.order_by(VersionRow.version.desc(), VariantRow.id).limit(_MAX_REJECTIONS))
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
