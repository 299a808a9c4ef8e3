"""Schema migrations, on SQLite and PostgreSQL.

- A database created by upgrading from empty matches the models (what ``alembic check`` does).
- A database made at revision 1, with data in it, upgrades to head with its data intact. When
  a migration is added, keep the revision-1 fixture (``_fill_revision_1``) and add checks here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import jaxport
from jaxport.migrations import HEAD, alembic_config
from jaxport.registry._db import create_registry_engine, current_revision
from jaxport.registry._models import Base


def test_upgrade_from_empty_matches_the_models(db_url):
    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        assert current_revision(conn) == HEAD
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == [], diff


def _fill_revision_1(conn: sa.Connection) -> None:
    """Rows as jaxport at schema revision 0001 wrote them."""
    conn.execute(
        sa.text("INSERT INTO models (id, name, last_version, created_at) VALUES (1, 'm', 1, 1.0)")
    )
    conn.execute(
        sa.text(
            "INSERT INTO versions (id, model_id, version, created_at, metadata_json) "
            "VALUES (1, 1, 1, 1.0, '{}')"
        )
    )
    conn.execute(
        sa.text(f"INSERT INTO blobs (digest, size, created_at) VALUES ('{'a' * 64}', 3, 1.0)")
    )
    conn.execute(
        sa.text(
            "INSERT INTO variants (id, version_id, digest, fun_name, platforms, nr_devices, "
            "sharded, calling_convention_version, format_version, jax_version, jaxlib_version, "
            "vjp_order, "
            "shape_polymorphic, custom_call_targets, size_bytes, in_signature, out_signature, "
            f"created_at, metadata_json) VALUES (1, 1, '{'a' * 64}', 'f', 'cpu', 1, false, 10, 1, "
            "'0.10.2', '0.10.2', 0, false, '[]', 3, 'x', 'y', 1.0, '{}')"
        )
    )
    conn.execute(sa.text("INSERT INTO variant_platforms (variant_id, platform) VALUES (1, 'cpu')"))
    conn.execute(
        sa.text(
            "INSERT INTO aliases (model_id, alias, version, updated_at) VALUES (1, 'prod', 1, 1.0)"
        )
    )


def test_revision_1_database_with_data_upgrades_intact(db_url, tmp_path):
    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        _fill_revision_1(conn)
    engine.dispose()
    reg = jaxport.Registry(db_url, blobs=tmp_path / "b", upgrade=True)
    ref = reg.list("m")[0]
    assert (ref.name, ref.version, ref.digests) == ("m", 1, ("a" * 64,))
    assert ref.variants[0].kind == "function"  # revision 0004's default for older rows
    assert ref.variants[0].stablehlo_version is None  # revision 0017: not recorded before
    assert reg.aliases("m") == {"prod": 1}
    assert reg.resolve("m@prod", platform="cpu").chosen.digest == "a" * 64
    assert [v.digest for v in reg.search(name="m")] == ["a" * 64]  # revision 0012's model_id
    for filters in (  # revision 0013's indexes, each driving alone
        {"jax_version": "0.10"},
        {"jax_version": "0.10.2"},
        {"calling_convention_version": 10},
        {"shape_polymorphic": False},
        {"nr_devices": 4},
    ):
        assert [v.digest for v in reg.search(**filters)] == ["a" * 64], filters
    assert reg.search(jax_version="0.1") == reg.search(shape_polymorphic=True) == []
    reg.close()


def test_older_database_needs_an_explicit_upgrade(db_url, tmp_path):
    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
    engine.dispose()
    try:
        jaxport.Registry(db_url, blobs=tmp_path / "b")
    except jaxport.SchemaVersionError as e:
        assert e.found == "0001" and "upgrade=True" in str(e) and "jaxport db upgrade" in str(e)
    else:
        raise AssertionError("an older schema must not be opened without upgrade=True")


def test_cli_db_current_and_upgrade(db_url):
    from click.testing import CliRunner

    from jaxport._cli.main import main

    runner = CliRunner()
    result = runner.invoke(main, ["--registry", db_url, "db", "current"])
    assert result.exit_code == 0 and "database: none" in result.output
    result = runner.invoke(main, ["--registry", db_url, "db", "upgrade"])
    assert result.exit_code == 0 and result.output == f"upgraded from empty to {HEAD}\n"
    result = runner.invoke(main, ["--registry", db_url, "db", "upgrade"])
    assert (
        result.exit_code == 0 and result.output == f"already at {HEAD} (head): nothing to upgrade\n"
    )
    result = runner.invoke(main, ["--registry", db_url, "db", "current"])
    assert f"database: {HEAD}" in result.output
    bad = "sqlite:////nonexistent-dir/x.db"
    result = runner.invoke(main, ["--registry", bad, "db", "current"])
    assert result.exit_code == 1
    assert "RegistryError: cannot open the SQLite registry /nonexistent-dir/x.db" in result.output
    result = runner.invoke(main, ["--registry", "nosuchdb://x", "db", "current"])
    assert result.exit_code == 1 and "RegistryError" in result.output


def test_revision_5_keys_versions_and_keeps_older_duplicates(db_url, tmp_path):
    """Versions of one content that concurrent pushes made twice before revision 0005 are
    kept; the newest gets the content key (the one push returned), the older NULL."""
    from jaxport.registry._publish import content_key

    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0004")
        _fill_revision_1(conn)
        conn.execute(sa.text("UPDATE models SET last_version = 3"))
        conn.execute(
            sa.text(f"INSERT INTO blobs (digest, size, created_at) VALUES ('{'b' * 64}', 3, 1.0)")
        )
        for version_id, digest in ((2, "a" * 64), (3, "b" * 64)):
            conn.execute(
                sa.text(
                    "INSERT INTO versions (id, model_id, version, created_at, metadata_json) "
                    f"VALUES ({version_id}, 1, {version_id}, 1.0, '{{}}')"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO variants (id, version_id, digest, fun_name, platforms, "
                    "nr_devices, sharded, calling_convention_version, format_version, "
                    "jax_version, jaxlib_version, vjp_order, shape_polymorphic, "
                    "custom_call_targets, size_bytes, in_signature, out_signature, created_at, "
                    f"metadata_json) VALUES ({version_id}, {version_id}, '{digest}', 'f', "
                    "'cpu', 1, false, 10, 1, '0.10.2', '0.10.2', 0, false, '[]', 3, 'x', 'y', "
                    "1.0, '{}')"
                )
            )
        command.upgrade(alembic_config(conn), "head")
        rows = conn.execute(sa.text("SELECT version, content_key FROM versions"))
        keys = {version: key for version, key in rows}
    assert keys == {1: None, 2: content_key(["a" * 64], None), 3: content_key(["b" * 64], None)}
    with engine.begin() as conn:  # and back
        command.downgrade(alembic_config(conn), "0004")
        assert current_revision(conn) == "0004"
        assert conn.execute(sa.text("SELECT count(*) FROM variants")).scalar_one() == 3
    engine.dispose()
