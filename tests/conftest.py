"""Test set-up: 8 fake CPU devices (set before jax is imported) and shared helpers; the S3
server fixtures (``s3_server``, ``s3``) come from ``tests/_s3.py``.

The quick set (the README's test command, ``pytest -m "not slow"``, about 2 minutes) leaves out
the modules in ``SLOW_MODULES`` and tests marked ``slow``; ``.ci/run`` runs every test.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.export  # jax 0.7 does not import it with jax: tests use jax.export.export
import pytest

from _s3 import s3, s3_server  # noqa: F401  (fixtures)

#: Modules of the full suite only: campaigns, every entry of jax's back-compat data, real
#: libraries' models, subprocess-heavy CLI and server suites, browser tests.
SLOW_MODULES = frozenset({
    "test_audit_scale.py", "test_cli_models.py", "test_examples.py", "test_jax_backcompat.py",
    "test_libraries.py", "test_reports.py", "test_rescue.py", "test_server.py",
    "test_server_attacks.py", "test_server_pages.py", "test_signing.py", "test_window.py",
    "test_registry_concurrency.py", "test_children.py",
    "test_registry_models.py", "test_hypothesis_roundtrip.py", "test_audit.py",
    "test_sandbox.py", "test_fuzz.py", "test_bounded_models.py", "test_crash_consistency.py",
    "test_safety.py", "test_isolation.py",
    # Real servers, workers and subprocess CLI sessions on both databases (measured 2026-11-27:
    # 1,540 of the quick set's 1,920 test-seconds); .ci/run's slow pass runs them.
    "test_cli.py", "test_watch.py", "test_registry_trust.py", "test_fleet_rescue.py",
    "test_registry_queries.py", "test_lineage.py", "test_retention.py", "test_gates.py",
    "test_presigned.py", "test_client_backends.py", "test_audit_verdicts.py",
    "test_sql_counts.py", "test_server_pages_team.py", "test_issue26_attacks.py",
    "test_issue26_cli.py", "test_rescue_across_releases.py", "test_remote_lazy.py",
    "test_registry_s3.py", "test_newer_format.py", "test_oci_registry.py",
    "test_oci_cli.py", "test_compiled_cli.py", "test_mirror_server.py",
    "test_compiled_server.py",
})  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


_ENV = (
    "JAXPORT_REGISTRY",
    "JAXPORT_BLOBS",
    "JAXPORT_BLOBS_OPTIONS",
    "JAXPORT_HOME",
    "XDG_DATA_HOME",
)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch, tmp_path):
    """No test sees the user's registry: the JAXPORT_* variables and XDG_DATA_HOME are cleared,
    and the default home is a temporary directory."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def x64():
    """Enables 64-bit types for one test."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


#: PostgreSQL for the registry tests; .ci/run sets it, without it those tests skip.
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"


def _postgres_url(schema: str) -> str:
    base = os.environ[POSTGRES_URL_ENV]
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty registry database on each backend (PostgreSQL: a schema of its own)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    import uuid

    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(os.environ[POSTGRES_URL_ENV])
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield _postgres_url(schema)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def registry(db_url, tmp_path):
    """A Registry on each backend, with a local blob directory."""
    from jaxport import Registry

    reg = Registry(db_url, blobs=tmp_path / "blobs")
    yield reg
    reg.close()
