"""The registry server's web pages (issue 17), seen as a person sees them: a real server process
(uvicorn, ``tests/_pages_app.py``) on 127.0.0.1, opened in headless Chromium (Playwright).

The registry is filled once per module: three functions (``sine`` with two versions, aliases
and a TPU variant; ``tanh``; ``drift``, whose golden example is wrong on purpose so that its
full audit finds a mismatch), a model (``tiny-lm``), a static audit of everything, full audits
of ``sine:2`` and ``drift`` with the running jax, hand-made findings of an older jax release
(so the matrix has two columns and a red cell), and tokens made and revoked (events).

Needs Debian's Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it) and the ``playwright``
package (the ``dev`` extra); without either, every test here is skipped, saying which.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import pytest

import jaxport

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (the dev extra)"
)

from _pages_app import BLOBS_ENV, OPEN_READ_ENV, REGISTRY_ENV  # noqa: E402

TESTS = Path(__file__).resolve().parent
#: Seconds a server process may take to answer its first request.
START_TIMEOUT = 20.0
OLD_JAX = "0.7.0"
NEW_JAX = jax.__version__
#: The matrix's colours (``server/static/site.css``), as the browser computes them.
GREEN, RED, ORANGE = "rgb(45, 164, 78)", "rgb(207, 34, 46)", "rgb(251, 133, 0)"
GREY, WHITE = "rgb(140, 149, 159)", "rgb(255, 255, 255)"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _exp(fun: Any, platforms: tuple[str, ...] = ("cpu",)) -> Any:
    return jax.export.export(jax.jit(fun), platforms=platforms)(jnp.zeros(4, jnp.float32))


def _model() -> jaxport.Model:
    params = {"w": np.eye(4, dtype=np.float32), "b": np.zeros(4, np.float32)}
    x = jax.ShapeDtypeStruct((2, 4), jnp.float32)
    return jaxport.Model(params, {"apply": lambda p, x: x @ p["w"] + p["b"]}, {"apply": [x]})


def _older_findings(url: str, reg: jaxport.Registry) -> None:
    """Findings of an older jax, written as a stored audit would (no such jax here)."""
    import sqlalchemy as sa

    from jaxport.registry._models import AuditRow

    rows = [
        (reg.get("sine:1").digests[0], "incompatible", "hand-made: calling convention too new"),
        (reg.get("tanh:1").digests[0], "crash", "hand-made: the worker died (SIGSEGV)"),
        (reg.get("drift:1").digests[0], "ok", "hand-made"),
    ]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for digest, status, reason in rows:
            conn.execute(
                sa.insert(AuditRow),
                {"digest": digest, "jax_version": OLD_JAX, "jaxlib_version": OLD_JAX,
                 "platform": "cpu", "status": status, "reason": reason, "details_json": "{}",
                 "seconds": 0.1, "created_at": 1.0, "level": "static"},
            )  # fmt: skip
    engine.dispose()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The registry's URL, blob directory and token secrets."""
    where = tmp_path_factory.mktemp("pages")
    url, blobs = f"sqlite:///{where / 'registry.db'}", where / "blobs"
    reg = jaxport.Registry(url, blobs=blobs)
    reg.push(_exp(jnp.sin), "sine", aliases=["prod"], metadata={"owner": "<b>vision</b>"})
    reg.push([_exp(jnp.cos), _exp(jnp.cos, ("tpu",))], "sine")
    reg.alias("sine", "prod", 2)
    reg.alias("sine", "beta", 1)
    reg.push(_exp(jnp.tanh), "tanh")
    x = np.linspace(-1, 1, 4).astype(np.float32)
    wrong = jaxport.Example((x,), outputs=np.exp(x) + 1)  # a golden example that is off
    reg.push(_exp(jnp.exp), "drift", examples=[wrong])
    reg.push(_model(), "tiny-lm")
    reg.audit(level="static")
    reg.audit("sine:2")
    reg.audit("drift")
    _older_findings(url, reg)
    secrets = {
        name: reg.tokens.create(name, scope, prefixes=prefixes).secret
        for name, scope, prefixes in [
            ("viewer", "read", ()),
            ("tanh-only", "read", ("tanh",)),
            ("boss", "admin", ()),
            ("gone", "read", ()),
        ]
    }
    reg.tokens.revoke("gone")
    digests = {f"{r.name}:{r.version}": r.digests[0] for r in reg.list(limit=100)}
    reg.close()
    yield {"url": url, "blobs": blobs, "secrets": secrets, "where": where, "digests": digests}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(filled: dict[str, Any], *, open_read: bool) -> Iterator[str]:
    """A uvicorn process serving the registry; yields its base URL; stopped on exit."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, REGISTRY_ENV: filled["url"], BLOBS_ENV: str(filled["blobs"]),
           OPEN_READ_ENV: "1" if open_read else "0"}  # fmt: skip
    command = [
        sys.executable, "-P", "-m", "uvicorn", "--factory", "_pages_app:make_app",
        "--app-dir", str(TESTS), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning",
    ]  # fmt: skip
    log_path = filled["where"] / f"server-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, env=env, cwd=filled["where"], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}): {log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{base}/static/site.css", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"no answer in {START_TIMEOUT} s: {log_path.read_text()}")
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(filled: dict[str, Any]) -> Iterator[str]:
    with _server(filled, open_read=False) as base:
        yield base


@pytest.fixture(scope="module")
def open_server(filled: dict[str, Any]) -> Iterator[str]:
    with _server(filled, open_read=True) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM))
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile (no cookies) per test."""
    ctx = browser.new_context()
    ctx.set_default_timeout(10_000)
    yield ctx
    ctx.close()


def _sign_in(context: Any, server: str, secret: str) -> Any:
    """Signs in through the form, as a person would; returns the page (at ``/``)."""
    page = context.new_page()
    page.goto(f"{server}/login")
    page.fill("#token", secret)
    page.click("form.login button")
    page.wait_for_url(f"{server}/")
    return page


def _rows(page: Any, selector: str) -> list[list[str]]:
    """The text of each cell of each body row of a table."""
    return [
        [c.strip() for c in row.locator("th, td").all_inner_texts()]
        for row in page.locator(f"{selector} tbody tr").all()
    ]


def _background(locator: Any) -> str:
    return str(locator.evaluate("e => getComputedStyle(e).backgroundColor"))


# -- signing in ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/names/sine", "/names/sine/2", "/matrix", "/events"])
def test_without_a_token_a_page_is_401_and_links_to_login(context, server, path):
    page = context.new_page()
    answer = page.goto(f"{server}{path}")
    assert answer.status == 401
    assert page.locator("h1").inner_text() == "Sign in needed"
    assert "needs a token with the read scope" in page.locator("#error").inner_text()
    assert "Traceback" not in page.content()
    page.click("#login-link")
    assert page.url == f"{server}/login"
    assert page.locator("#token").get_attribute("type") == "password"


def test_login_sets_an_httponly_strict_cookie_and_never_puts_the_token_in_a_url(
    context, server, filled
):
    secret = filled["secrets"]["viewer"]
    urls: list[str] = []
    context.on("request", lambda r: urls.append(r.url))
    page = _sign_in(context, server, secret)
    (cookie,) = context.cookies()
    assert (cookie["name"], cookie["value"]) == ("jaxport_token", secret)
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert urls and not any(secret in u for u in urls)
    assert secret not in page.content()
    assert "signed in as viewer" in page.locator("header .who").inner_text()
    # Sign out drops the cookie: pages ask for a token again.
    page.click("header .who button")
    page.wait_for_url(f"{server}/login")
    assert context.cookies() == []
    assert page.goto(f"{server}/").status == 401


def test_a_bad_token_is_refused_on_the_form_without_showing_it(context, server):
    page = context.new_page()
    page.goto(f"{server}/login")
    page.fill("#token", "jxp_not-a-real-token")
    page.click("form.login button")
    assert page.locator("#error").inner_text() == "unknown token"
    assert "jxp_not-a-real-token" not in page.content()
    assert context.cookies() == []


def test_a_revoked_token_in_the_cookie_gives_401_and_the_cookie_is_dropped(context, server, filled):
    context.add_cookies(
        [{"name": "jaxport_token", "value": filled["secrets"]["gone"], "url": server}]
    )
    page = context.new_page()
    assert page.goto(f"{server}/matrix").status == 401
    assert page.locator("#error").inner_text() == "token 'gone' was revoked"
    assert filled["secrets"]["gone"] not in page.content()
    assert context.cookies() == []


def test_the_cookie_reads_the_api_but_never_writes_or_administers(context, server, filled):
    secret = filled["secrets"]["boss"]
    context.add_cookies([{"name": "jaxport_token", "value": secret, "url": server}])
    names = context.request.get(f"{server}/api/v1/names")
    assert names.status == 200 and "sine" in names.json()["names"]
    assert context.request.get(f"{server}/api/v1/tokens").status == 401  # admin: header only
    header = {"Authorization": f"Bearer {secret}"}
    assert context.request.get(f"{server}/api/v1/tokens", headers=header).status == 200


def test_open_read_pages_need_no_token(context, open_server):
    page = context.new_page()
    assert page.goto(f"{open_server}/").status == 200
    assert [r[0] for r in _rows(page, "#names")] == ["drift", "sine", "tanh", "tiny-lm"]
    assert page.locator("header .who").inner_text().strip() == "Sign in"
    assert page.goto(f"{open_server}/matrix").status == 200


# -- what the pages show ------------------------------------------------------------------


def test_index_lists_every_name_with_newest_version_count_and_aliases(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    assert page.title() == "Names · jaxport registry"
    assert _rows(page, "#names") == [
        ["drift", "function", "1", "1", ""],
        ["sine", "function", "2", "2", "beta → 1 prod → 2"],
        ["tanh", "function", "1", "1", ""],
        ["tiny-lm", "model", "1", "1", ""],
    ]
    assert page.locator("script").count() == 0  # no JavaScript at all
    page.click("#names >> text=sine")
    assert page.url == f"{server}/names/sine"


def test_name_page_shows_versions_newest_first_variants_and_alias_history(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/names/sine")
    rows = _rows(page, "#versions")
    # Version 2's two variants, then version 1's: the version's cells span its variants.
    classes = [r.get_attribute("class") for r in page.locator("#versions tbody tr").all()]
    assert classes == ["version-2", "version-2", "version-1"]
    two_cpu, two_tpu, one_cpu = rows
    assert two_cpu[:2] == ["2", "function"] and one_cpu[:2] == ["1", "function"]
    assert ISO_UTC.match(two_cpu[2]) and ISO_UTC.match(one_cpu[2])
    variants = [two_cpu[3:], two_tpu, one_cpu[3:]]  # digest, platforms, devices, size, signed
    assert [v[1:3] for v in variants] == [["cpu", "1"], ["tpu", "1"], ["cpu", "1"]]
    for digest, _, _, size, signed in variants:
        assert re.fullmatch(r"sha256:[0-9a-f]{12}", digest)
        assert re.fullmatch(r"\d+\.\d KiB|\d+ B", size) and signed == "unsigned"
    assert _rows(page, "#aliases") == [["beta", "1"], ["prod", "2"]]
    history = [r[1:] for r in _rows(page, "#alias-history")]
    assert history == [["beta", "—", "1"], ["prod", "1", "2"], ["prod", "—", "1"]]


def test_version_page_shows_each_variants_facts_and_escapes_metadata(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/names/sine/1")
    variant = page.locator("section.variant")
    facts = dict(
        row.split("\t", 1) for row in variant.locator("table.facts").inner_text().splitlines()
    )
    assert facts["kind"] == "function" and facts["function"] == "sin"
    assert facts["jax"] == f"{NEW_JAX} (jaxlib {jaxlib.__version__})"
    assert int(facts["calling convention"]) >= 9 and facts["platforms"] == "cpu"
    assert (facts["in"], facts["out"]) == ("[0][0]: float32[4]", ".: float32[4]")
    assert facts["custom-call targets"] == "none"
    assert re.fullmatch(r"\d\.\d KiB \(\d+ bytes\)", facts["size"])
    assert facts["digest"] == f"sha256:{filled['digests']['sine:1']}"
    # Metadata is text, never markup.
    cell = page.locator("#metadata td")
    assert cell.inner_text() == "<b>vision</b>" and cell.locator("b").count() == 0
    findings = _rows(page, "#findings")
    assert {(r[2], r[3], r[4]) for r in findings} == {
        (NEW_JAX, "static", "unknown"),  # a static verdict is never ok
        (OLD_JAX, "static", "incompatible"),
    }
    page.goto(f"{server}/names/sine/2")
    assert page.locator("section.variant").count() == 2


def test_a_model_version_lists_its_methods_and_tensors(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/names/tiny-lm/1")
    methods = _rows(page, "table.methods")
    assert [m[0] for m in methods] == ["apply"]
    assert "float32[2, 4]" in methods[0][1]
    tensors = _rows(page, "table.tensors")
    assert [(t[0], t[1], t[2], t[3]) for t in tensors] == [
        ("['b']", "float32", "[4]", "16 B"),
        ("['w']", "float32", "[4, 4]", "64 B"),
    ]


def test_matrix_colours_each_cell_by_status_with_a_legend(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/matrix")
    heads = page.locator("#matrix thead th").all_inner_texts()
    assert heads == ["variant", "digest", "platform", f"jax {OLD_JAX}", f"jax {NEW_JAX}"]

    def cell(variant: str, platform: str, release: str) -> Any:
        row = f"#matrix tr[data-variant='{variant}'][data-platform='{platform}']"
        return page.locator(f"{row} td.cell[data-release='{release}']")

    expected = [  # variant, platform, release, status, class, colour
        ("drift:1", "cpu", NEW_JAX, "mismatch", "st-mismatch", ORANGE),
        ("drift:1", "cpu", OLD_JAX, "ok", "st-ok", GREEN),
        ("sine:1", "cpu", OLD_JAX, "incompatible", "st-fail", RED),
        ("tanh:1", "cpu", OLD_JAX, "crash", "st-fail", RED),
        ("sine:2", "cpu", NEW_JAX, "ok", "st-ok", GREEN),
        ("sine:2", "tpu", NEW_JAX, "not-run", "st-not-run", GREY),
        ("sine:2", "tpu", OLD_JAX, "\N{EN DASH}", "st-none", WHITE),
    ]
    for variant, platform, release, text, css_class, colour in expected:
        c = cell(variant, platform, release)
        assert c.inner_text() == text, (variant, platform, release)
        assert css_class in c.get_attribute("class").split()
        assert _background(c) == colour, (variant, platform, release)
    legend = page.locator("#legend li").all_inner_texts()
    assert legend == [*jaxport.audit.STATUSES, "not audited"]
    swatches = [_background(s) for s in page.locator("#legend .swatch").all()]
    assert dict(zip(legend, swatches, strict=True)) == {
        "ok": GREEN, "incompatible": RED, "compile-error": RED, "mismatch": ORANGE,
        "error": RED, "crash": RED, "not-run": GREY, "unknown": GREY, "not audited": WHITE,
    }  # fmt: skip
    # One name's matrix has its rows only.
    page.goto(f"{server}/names/tanh/matrix")
    assert {r[0] for r in _rows(page, "#matrix")} == {"tanh:1"}


def test_events_are_newest_first_with_time_actor_kind_and_reference(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/events")
    rows = _rows(page, "#events")
    ids = [int(r[0]) for r in rows]
    assert ids == sorted(ids, reverse=True)
    assert all(ISO_UTC.match(r[1]) for r in rows)
    kinds = [r[3] for r in rows]
    assert kinds[:5] == ["token-revoke", "token-create", "token-create", "token-create",
                         "token-create"]  # fmt: skip
    assert kinds.count("push") == 5 and kinds.count("alias") == 2
    assert all(r[2].startswith("local:") for r in rows)
    assert ["alias", "sine:1"] in [r[3:5] for r in rows]
    revoke = rows[0]
    assert revoke[5] == "revoked token gone"
    assert rows[1][5] == "created token gone (read)"
    # Keyset paging: only events older than the third.
    page.goto(f"{server}/events?before={ids[2]}")
    assert [int(r[0]) for r in _rows(page, "#events")] == ids[3:]


def test_a_prefix_limited_token_sees_its_names_only(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["tanh-only"])
    assert [r[0] for r in _rows(page, "#names")] == ["tanh"]
    answer = page.goto(f"{server}/names/sine")
    assert answer.status == 403 and "limited to names starting with 'tanh'" in page.content()
    page.goto(f"{server}/matrix")
    assert {r[0] for r in _rows(page, "#matrix")} == {"tanh:1"}
    page.goto(f"{server}/events")
    assert {r[4] for r in _rows(page, "#events")} == {"tanh:1"}


def test_errors_are_pages(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    answer = page.goto(f"{server}/names/sine/99")
    assert answer.status == 404 and page.locator("h1").inner_text() == "Not found"
    assert page.goto(f"{server}/names/sine/two").status == 422
    assert page.goto(f"{server}/events?before=0").status == 422
    assert "Traceback" not in page.content()


def test_pages_of_versions_and_names(context, server, filled):
    from jaxport.server._views import version_rows

    with jaxport.Registry(filled["url"], blobs=filled["blobs"]) as reg:
        first, total = version_rows(reg, "sine", page=1, per_page=1)
        second, _ = version_rows(reg, "sine", page=2, per_page=1)
    assert total == 2 and [r.version for r in first + second] == [2, 1]
    assert [len(r.variants) for r in first + second] == [2, 1]
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    page.goto(f"{server}/?page=2")
    assert page.locator("#names").count() == 0
    assert page.locator("main p.muted").inner_text() == "No names on this page."
    page.click("text=← previous")
    assert len(_rows(page, "#names")) == 4


# -- the API's documentation page, offline, under its Content-Security-Policy (issue 24) ----


def test_api_docs_work_offline_under_a_content_security_policy(context, server):
    """Every request the page makes goes to the server itself (anything else is aborted, as
    offline); Swagger UI renders the API's operations; the browser reports no CSP violation."""
    outside: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(server):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    answer = page.goto(f"{server}/api/v1/docs")
    assert answer.status == 200
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp
    page.wait_for_selector(".opblock", timeout=20_000)
    assert page.locator(".opblock").count() > 20  # one per operation of /api/v1
    assert page.locator(".info .title").inner_text().startswith("jaxport registry")
    assert outside == []
    assert not [m for m in console if "Content Security Policy" in m], console


@pytest.mark.parametrize("path", ["/", "/login", "/matrix", "/static/site.css"])
def test_every_page_has_a_content_security_policy_without_scripts(context, server, path):
    answer = context.new_page().goto(f"{server}{path}")
    csp = answer.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert "frame-ancestors 'none'" in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
