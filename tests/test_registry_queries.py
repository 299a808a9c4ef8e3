"""The one-statement queries (``registry/_queries.py``) give the answers of plain ones, on
SQLite and PostgreSQL: keyset pages of ``list`` and ``search`` put together are the whole
listing, and ``resolve``'s pick among the newest variants is the one its SQL fallback (the
rules as predicates, over every variant) makes, also where the answer lies past them."""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sqlalchemy as sa
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from _helpers import add_versions
from jaxport.registry import _queries
from jaxport.registry._models import NameRow, VariantRow, VersionRow
from jaxport.registry._names import parse_reference

PLATFORMS = [None, "cpu", "tpu", "cuda", "rocm"]
DEVICES = [None, 1, 8]


def _exp(fun=jnp.sin, platforms=None):
    return jax.export.export(jax.jit(fun), platforms=platforms)(
        jax.ShapeDtypeStruct((8, 2), jnp.float32)
    )


def _sharded():
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
    fun = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x")))
    return jax.export.export(fun)(jax.ShapeDtypeStruct((8, 2), jnp.float32))


@pytest.fixture
def many(registry):
    """``w``: version 1 (cpu; tpu and cuda; 8-device cpu), then 60 tpu versions, 40 cuda
    versions of 3 variants, one of 150 cpu variants, one without variants, 5 tpu versions;
    ``w@a`` -> 1; ``x``: a cpu version, then 4 tpu ones; ``y``: the same with 12 tpu ones;
    ``a`` and ``z``: a version each."""
    registry.push([_exp(jnp.sin, ("cpu",)), _exp(jnp.cos, ("tpu", "cuda")), _sharded()], "w")
    add_versions(registry, "w", 60, platforms=("tpu",))
    add_versions(registry, "w", 40, platforms=("cuda",), variants=3)
    add_versions(registry, "w", 1, platforms=("cpu",), variants=150)
    with registry._backend.engine.begin() as conn:  # a version without variants
        model_id, last = conn.execute(
            sa.select(NameRow.id, NameRow.last_version).where(NameRow.name == "w")
        ).one()
        conn.execute(
            sa.insert(VersionRow),
            {"model_id": model_id, "version": last + 1, "created_at": 1.0, "metadata_json": "{}"},
        )
        conn.execute(sa.update(NameRow).where(NameRow.id == model_id).values(last_version=last + 1))
    add_versions(registry, "w", 5, platforms=("tpu",))
    registry.alias("w", "a", 1)
    for name, newer in (("x", 4), ("y", 12)):
        registry.push(_exp(jnp.sin, ("cpu",)), name)
        add_versions(registry, name, newer, platforms=("tpu",))
    registry.push(_exp(jnp.tan), "a")
    registry.push(_exp(jnp.exp), "z")
    return registry


def _fallback(registry, reference, platform, nr_devices):
    """What ``resolve`` answers in SQL alone (its path where the window does not tell)."""
    ref = parse_reference(reference)
    with registry._backend.engine.connect() as conn:
        model_id = _queries.model_id_of(conn, ref.name)
        version = ref.version
        if ref.alias is not None:
            version = _queries.alias_version(conn, model_id, ref.name, ref.alias)
        args = (conn, model_id, ref.name, version, platform, nr_devices)
        chosen = _queries._best_variant(*args)
        return chosen, tuple(_queries._rejections(*args, chosen))


def test_resolve_picks_as_the_sql_rules_do(many):
    last = many.get("w").version  # the newest: 5 tpu versions after the empty one
    references = ["w", "w:1", "w@a", "w:30", "w:80", f"w:{last - 6}", f"w:{last - 5}", "x", "y"]
    for reference, platform, devices in itertools.product(references, PLATFORMS, DEVICES):
        resolution = many.resolve(reference, platform=platform, nr_devices=devices)
        expected = _fallback(many, reference, platform, devices)
        assert (resolution.chosen, resolution.rejected) == expected, (reference, platform)


def test_get_of_a_version_without_variants(many):
    empty = many.get("w").version - 5
    ref = many.get(f"w:{empty}")
    assert (ref.version, ref.variants, ref.metadata) == (empty, (), {})
    assert many.resolve(f"w:{empty}", platform=None).chosen is None


@pytest.mark.parametrize("limit", [1, 7, 50])
def test_list_pages_are_the_whole_listing(many, limit):
    whole = [(r.name, r.version, r.digests) for r in many.list(limit=1_000_000)]
    assert [n for n, _, _ in whole] == ["a"] + ["w"] * (len(whole) - 20) + ["x"] * 5 + [
        "y"
    ] * 13 + ["z"]
    for name in (None, "w", "y", "z"):
        expected = [x for x in whole if name is None or x[0] == name]
        pages, after = [], None
        while page := many.list(name, limit=limit, after=after):
            pages += [(r.name, r.version, r.digests) for r in page]
            after = (page[-1].name, page[-1].version)
        assert pages == expected, name
    # after a key that is no version: from the next one on
    assert [r.name for r in many.list(limit=2, after=("b", 1))] == ["w", "w"]
    assert [(r.name, r.version) for r in many.list(limit=2, after=("x", 5))] == [("y", 1), ("y", 2)]
    assert [r.version for r in many.list("w", limit=2, after=("a", 9))] == [1, 2]
    assert many.list("a", limit=2, after=("b", 1)) == []


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"platform": "cuda"},
        {"platform": "cpu", "nr_devices": 8},
        {"name": "w", "platform": "tpu"},
        {"fun_name": "sin"},
        {"fun_name": "cos", "platform": "cuda"},
        {"name": "w", "fun_name": "sin", "platform": "cpu"},
        {"jax_version": jax.__version__.rsplit(".", 1)[0]},
    ],
    ids=str,
)
def test_search_pages_are_every_match(many, filters):
    everything = many.search(limit=1_000_000)
    by_python = [
        v.variant_id
        for v in everything
        if v.runs_on(filters.get("platform"), filters.get("nr_devices")) is None
        and filters.get("name", v.name) == v.name
        and filters.get("fun_name", v.fun_name) == v.fun_name
    ]
    assert by_python == sorted(by_python)
    pages, after = [], None
    while page := many.search(**filters, limit=7, after=after):
        pages += [v.variant_id for v in page]
        after = page[-1].variant_id
    assert pages == by_python and pages


def _matches(v, filters) -> bool:
    """``search``'s filters, in Python."""
    prefix = filters.get("jax_version")
    return (
        v.runs_on(filters.get("platform"), filters.get("nr_devices")) is None
        and filters.get("name", v.name) == v.name
        and filters.get("fun_name", v.fun_name) == v.fun_name
        and (prefix is None or v.jax_version == prefix or v.jax_version.startswith(f"{prefix}."))
        and filters.get("calling_convention_version", v.calling_convention_version)
        == v.calling_convention_version
        and filters.get("shape_polymorphic", v.shape_polymorphic) == v.shape_polymorphic
    )


@pytest.fixture
def varied(many):
    """``many`` with some variants' columns changed in SQL: jax versions that share a prefix
    as text but not as a release (0.10.2 and 0.10.20), older calling conventions, polymorphic
    shapes, 4-device and 1-device sharded exports."""
    changes = [
        (7, {"jax_version": "0.10.20"}),
        (11, {"jax_version": "0.9.1", "calling_convention_version": 9}),
        (13, {"jax_version": "0.10.2.dev1", "shape_polymorphic": True}),
        (17, {"jax_version": "0.10", "nr_devices": 4, "sharded": True}),
        (19, {"jax_version": "0.10-rc1", "sharded": True}),
    ]
    with many._backend.engine.begin() as conn:
        for every, values in changes:
            conn.execute(sa.update(VariantRow).where(VariantRow.id % every == 0).values(**values))
    return many


@pytest.mark.parametrize(
    "filters",
    [
        {"jax_version": "0.10.2"},
        {"jax_version": "0.10"},
        {"jax_version": "0.9"},
        {"jax_version": "0.1"},
        {"calling_convention_version": 9},
        {"shape_polymorphic": True},
        {"shape_polymorphic": False},
        {"nr_devices": 1},
        {"nr_devices": 4},
        {"nr_devices": 8},
        {"jax_version": "0.10", "nr_devices": 4},
        {"shape_polymorphic": False, "nr_devices": 8, "calling_convention_version": 9},
        {"platform": "tpu", "jax_version": "0.10.2", "shape_polymorphic": False},
        {"fun_name": "sin", "nr_devices": 1, "jax_version": "0.9"},
        {"name": "w", "jax_version": "0.10.20", "nr_devices": 4},
        {"name": "y", "shape_polymorphic": True},
    ],
    ids=str,
)
def test_search_by_any_filter_pages_are_every_match(varied, filters):
    expected = [v.variant_id for v in varied.search(limit=1_000_000) if _matches(v, filters)]
    pages, after = [], None
    while page := varied.search(**filters, limit=7, after=after):
        pages += [v.variant_id for v in page]
        after = page[-1].variant_id
    assert pages == expected


@pytest.mark.parametrize(
    ("filters", "index", "sorted_"),
    [
        ({"fun_name": "sin"}, "ix_variants_fun_name", True),
        ({"platform": "tpu"}, "ix_variant_platforms_platform", False),
        ({"jax_version": "0.10.2"}, "ix_variants_jax_version", True),
        ({"calling_convention_version": 9}, "ix_variants_calling_convention", False),
        ({"shape_polymorphic": True}, "ix_variants_shape_polymorphic", False),
        ({"nr_devices": 1}, "ix_variants_nr_devices", False),
        ({"nr_devices": 8}, "ix_variants_nr_devices", True),
        ({"nr_devices": 8, "jax_version": "0.9"}, "ix_variants_jax_version", True),
        ({"shape_polymorphic": True, "nr_devices": 8}, "ix_variants_shape_polymorphic", False),
    ],
    ids=str,
)
def test_sqlite_drives_a_search_by_one_index(tmp_path, filters, index, sorted_):
    """A search is driven by the index of its first filter in ``_search``'s order, the
    others checked on its rows, each part read in ``variant_id`` order (only the union of two
    parts, ``nr_devices`` and ``jax_version``, sorts: at most a page from each; and the hash
    of ``fun_name``). ``variants`` is scanned in primary-key order only for the versions
    longer than a ``jax_version`` (``test_sqlite_search_that_matches_nothing_reads_nothing``:
    not when there is none)."""
    import jaxport

    registry = jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b")
    registry.push(_exp(), "w")
    details = _plan(registry, lambda: registry.search(**filters, limit=7, after=3))
    by_key = re.search(r"SCAN variants\b|variants USING INTEGER PRIMARY KEY \(rowid>", details)
    by_key = by_key is not None
    assert index in details and by_key == ("jax_version" in filters), details
    assert sorted_ or "TEMP B-TREE" not in details, details
    registry.close()


@pytest.mark.parametrize(
    "filters",
    [
        {"fun_name": "none"},
        {"platform": "rocm"},
        {"jax_version": "0.1"},
        {"jax_version": "9"},
        {"jax_version": jax.__version__ + ".1"},
        {"calling_convention_version": 3},
        {"shape_polymorphic": True},
        {"fun_name": "none", "jax_version": "0.1", "platform": "cpu"},  # fun_name drives
    ],
    ids=str,
)
def test_sqlite_search_that_matches_nothing_reads_nothing(tmp_path, filters):
    """SQLite's virtual-machine steps for a search that matches nothing do not grow with the
    registry (200 against 2,000 versions): its driving filter's index finds nothing and no
    row of ``variants`` is read (a count of work, not a timing)."""
    import jaxport
    from jaxport.registry._search import SearchFilters, search_statement

    registry = jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b")
    registry.push(_exp(), "w")
    steps = []
    for total in (200, 2000):
        add_versions(registry, "w", total - len(registry.list("w", limit=1_000_000)))
        assert registry.search(**filters, limit=50) == []
        statement, parameters = search_statement(SearchFilters.check(filters), 50, None, "sqlite")
        steps.append(_sqlite_steps(registry, statement, parameters))
    assert steps[1] <= steps[0] + 5, steps
    registry.close()


def _sqlite_steps(registry, statement, parameters) -> int:
    """Tens of SQLite virtual-machine instructions ``statement`` runs (a progress handler)."""
    compiled = statement.compile(dialect=registry._backend.engine.dialect)
    values = compiled.construct_params(parameters)
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    raw = registry._backend.engine.raw_connection()
    try:
        raw.driver_connection.set_progress_handler(step, 10)
        raw.cursor().execute(str(compiled), [values[k] for k in compiled.positiontup]).fetchall()
        raw.driver_connection.set_progress_handler(None, 0)
    finally:
        raw.close()
    return steps[0]


def _plan(registry, call) -> str:
    """SQLite's plan of the last statement ``call`` runs."""
    statements = []
    sa.event.listen(
        registry._backend.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, parameters, *a: statements.append((statement, parameters)),
    )
    call()
    statement, parameters = statements[-1]
    with registry._backend.engine.connect() as conn:
        plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
    return " | ".join(row[-1] for row in plan)


def test_sqlite_reads_a_name_search_from_its_index_in_order(tmp_path):
    """A page of ``search(name=...)`` is a range of ``ix_variants_model_id`` read in
    ``variant_id`` order (SQLite's plan: no sort), whatever the name's size."""
    import jaxport

    registry = jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b")
    registry.push(_exp(), "w")
    add_versions(registry, "w", 50)
    found = []
    details = _plan(registry, lambda: found.extend(registry.search(name="w", limit=7, after=3)))
    assert len(found) == 7
    assert "ix_variants_model_id" in details and "TEMP B-TREE" not in details, details
    registry.close()
