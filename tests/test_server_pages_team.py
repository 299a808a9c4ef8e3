"""The pages a team works from (issue 25 §5), in headless Chromium against a real server process
(``tests/test_server_pages.py``'s server and helpers): search on every page, a version's
description (Markdown, rendered inert), usage snippets, comparing two versions, the events in
words, error pages that keep the signed-in state.

The registry: ``vision`` (version 1 on cpu with a description that tries a ``<script>`` and a
``javascript:`` link, metadata ``owner=ml``; version 2 on cpu and tpu, ``prod`` moved to it),
``lm`` (a model whose version 2 changes its parameters' values and adds one), ``other``
(metadata ``owner=infra``), and tokens ``viewer`` and ``lm-only`` (names starting ``lm``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.registry import DESCRIPTION_KEY, MAX_DESCRIPTION_BYTES

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
from test_server_pages import CHROMIUM, ISO_UTC, _rows, _server, _sign_in

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)

NEW_JAX = jax.__version__
HOSTILE = """# Vision encoder

Encodes **images** for the search team. <script>alert(1)</script>

- [click me](javascript:alert(1))
- [entity](&#106;avascript:alert(2))
- [docs](https://example.com/vision) and [its versions](/names/vision)

<img src=x onerror=alert(3)>
"""
SECOND = "# Vision encoder, v2\n\nNow on TPU too."


def _exp(fun: Any, platforms: tuple[str, ...] = ("cpu",)) -> Any:
    return jax.export.export(jax.jit(fun), platforms=platforms)(jnp.zeros(4, jnp.float32))


def _model(scale: float, extra: bool) -> jaxport.Model:
    params = {"w": scale * np.eye(4, dtype=np.float32), "b": np.zeros(4, np.float32)}
    if extra:
        params["c"] = np.ones(4, np.float32)
    x = jax.ShapeDtypeStruct((2, 4), jnp.float32)
    return jaxport.Model(params, {"apply": lambda p, x: x @ p["w"] + p["b"]}, {"apply": [x]})


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    where = tmp_path_factory.mktemp("team-pages")
    url, blobs = f"sqlite:///{where / 'registry.db'}", where / "blobs"
    with jaxport.Registry(url, blobs=blobs) as reg:
        meta = {DESCRIPTION_KEY: HOSTILE, "owner": "ml", "team": "search"}
        reg.push(_exp(jnp.sin), "vision", aliases=["prod"], metadata=meta)
        reg.push(
            [_exp(jnp.cos), _exp(jnp.cos, ("tpu",))], "vision",
            metadata={DESCRIPTION_KEY: SECOND, "owner": "ml"},
        )  # fmt: skip
        reg.alias("vision", "prod", 2)
        reg.push(_model(1.0, extra=False), "lm")
        reg.push(_model(2.0, extra=True), "lm")
        reg.push(_exp(jnp.tanh), "other", metadata={"owner": "infra"})
        reg.audit(level="static")
        secrets = {
            name: reg.tokens.create(name, "read", prefixes=prefixes).secret
            for name, prefixes in [("viewer", ()), ("lm-only", ("lm",))]
        }
    yield {"url": url, "blobs": blobs, "secrets": secrets, "where": where}


@pytest.fixture(scope="module")
def server(filled: dict[str, Any]) -> Iterator[str]:
    with _server(filled, open_read=False) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM))
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context()
    ctx.set_default_timeout(10_000)
    yield ctx
    ctx.close()


@pytest.fixture
def viewer(context: Any, server: str, filled: dict[str, Any]) -> Any:
    """A page signed in as ``viewer``; it fails the test on any dialog (a script ran)."""
    page = _sign_in(context, server, filled["secrets"]["viewer"])
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield page
    assert dialogs == []


def _search(page: Any, text: str) -> list[list[str]]:
    """Types ``text`` into the header's search box and submits it; the results' rows."""
    page.fill("header form.search input[name=q]", text)
    page.click("header form.search button")
    page.wait_for_url(re.compile(r".*/search\?.*"))
    return _rows(page, "#results")


# -- a description is Markdown, rendered with HTML disabled ---------------------------------


def test_a_description_renders_as_markdown_and_its_html_and_scripts_are_inert(viewer, server):
    page = viewer
    page.goto(f"{server}/names/vision/1")
    card = page.locator("#description")
    assert card.locator("h1").inner_text() == "Vision encoder"
    assert card.locator("strong").inner_text() == "images"
    text = card.inner_text()
    assert "<script>alert(1)</script>" in text and "<img src=x onerror=alert(3)>" in text
    assert page.locator("script").count() == 0 and card.locator("img").count() == 0
    hrefs = [a.get_attribute("href") for a in card.locator("a").all()]
    assert hrefs == ["https://example.com/vision", "/names/vision"]
    assert "[click me](javascript:alert(1))" in text  # left as text, never a link
    rels = {a.get_attribute("rel") for a in card.locator("a").all()}
    assert rels == {"nofollow noopener noreferrer"}
    # The description is not repeated in the metadata table; the other keys are.
    assert _rows(page, "#metadata") == [["owner", "ml"], ["team", "search"]]
    card.locator("a", has_text="its versions").click()
    assert page.url == f"{server}/names/vision"


def test_the_name_page_shows_the_newest_versions_description(viewer, server):
    page = viewer
    page.goto(f"{server}/names/vision")
    card = page.locator("#description")
    assert card.locator("h1").inner_text() == "Vision encoder, v2"
    assert "From version 2" in card.inner_text()
    page.goto(f"{server}/names/other")
    assert page.locator("#description").count() == 0


def test_a_description_over_its_limit_is_refused_at_push(tmp_path):
    with jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b") as reg:
        too_long = {DESCRIPTION_KEY: "x" * (MAX_DESCRIPTION_BYTES + 1)}
        with pytest.raises(jaxport.InvalidNameError, match="description is 65537 bytes"):
            reg.push(_exp(jnp.sin), "f", metadata=too_long)
        reg.push(_exp(jnp.sin), "f", metadata={DESCRIPTION_KEY: "x" * MAX_DESCRIPTION_BYTES})


# -- search from every page -----------------------------------------------------------------


@pytest.mark.parametrize("start", ["/", "/names/vision", "/events", "/matrix", "/names/lm/1"])
def test_every_page_has_the_search_box(viewer, server, start):
    viewer.goto(f"{server}{start}")
    assert [r[0] for r in _search(viewer, "owner=ml")] == ["vision:2", "vision:1"]


def test_search_by_name_metadata_platform_and_jax_release(viewer, server):
    page = viewer
    page.goto(f"{server}/")
    assert [r[0] for r in _search(page, "owner=infra")] == ["other:1"]
    assert [r[0] for r in _search(page, "team=")] == ["vision:1"]  # has the key
    tpu = _search(page, "platform:tpu")
    assert [r[0] for r in tpu] == ["vision:2"] and tpu[0][3] == "tpu"  # the variant that matched
    assert [r[0] for r in _search(page, "VIS platform:CPU")] == ["vision:2", "vision:1"]
    assert [r[0] for r in _search(page, "lm")] == ["lm:2", "lm:1"]
    release = ".".join(NEW_JAX.split(".")[:2])
    assert len(_search(page, f"jax:{release}")) == 5
    assert _search(page, "jax:0.0") == [] and page.locator("#none").count() == 1
    assert _search(page, "owner=ml platform:tpu vision")[0][:2] == ["vision:2", "function"]
    row = _search(page, "owner=ml")[1]
    assert ISO_UTC.match(row[2]) and row[5].startswith("Encodes images for the search team.")
    # The search page's own form: the platform as a field.
    page.select_option("#find select[name=platform]", "tpu")
    page.fill("#find input[name=q]", "")
    page.click("#find button")
    assert [r[0] for r in _rows(page, "#results")] == ["vision:2"]
    assert page.locator("header form.search input[name=q]").input_value() == ""


def test_search_shows_a_prefix_limited_token_its_names_only(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["lm-only"])
    assert [r[0] for r in _search(page, "owner=ml")] == []
    assert [r[0] for r in _search(page, "platform:cpu")] == ["lm:2", "lm:1"]


def test_a_bad_search_is_a_400_page(viewer, server):
    answer = viewer.goto(f"{server}/search?platform=vax")
    assert answer.status == 400 and "vax" in viewer.locator("#error").inner_text()


# -- usage snippets -------------------------------------------------------------------------


def test_a_version_shows_how_to_pull_it_on_each_of_its_platforms(viewer, server):
    page = viewer
    page.goto(f"{server}/names/vision/2")
    snippets = page.locator("section.snippet")
    assert [s.get_attribute("data-platform") for s in snippets.all()] == ["cpu", "tpu"]
    tpu = page.locator("section.snippet[data-platform=tpu]")
    python = tpu.locator("pre.python").inner_text()
    assert f"jaxport.Registry('{server}')" in python
    assert "exported = reg.pull('vision:2', platform='tpu')" in python
    assert "# inputs: [0][0]: float32[4]" in python and "out = exported.call(...)" in python
    cli = tpu.locator("pre.cli").inner_text()
    assert cli == f"jaxport --registry {server} pull vision:2 --platform tpu"
    assert "Leave out platform=" in page.locator("main").inner_text()
    page.goto(f"{server}/names/lm/2")
    python = page.locator("section.snippet pre.python").inner_text()
    assert "model = reg.pull_model('lm:2', platform='cpu')" in python
    assert "# apply: (float32[2, 4])" in python and "model.methods['apply'](...)" in python


# -- comparing two versions -----------------------------------------------------------------


def test_compare_shows_a_parameter_change_side_by_side(viewer, server):
    page = viewer
    page.goto(f"{server}/names/lm")
    page.click("#compare-form button")  # version 1 with 2 by default
    assert page.url == f"{server}/names/lm/compare?a=1&b=2"
    changes = _rows(page, "#changes")
    whats = {r[0]: r for r in changes}
    assert whats["parameter added"][1:4] == ["[cpu x1] ['c']", "—", "float32[4]"]
    assert whats["parameter added"][4] == "breaking"
    assert "parameter values" in whats
    facts = {r[0]: r[1:] for r in _rows(page, "#facts")}
    assert facts["parameters"] == ["2 tensors, 80 B", "3 tensors, 96 B"]
    assert facts["kind"] == ["model", "model"]
    differs = page.locator("#facts tr.differs th").all_inner_texts()
    assert "parameters" in differs and "kind" not in differs


def test_compare_shows_platforms_signatures_and_audits(viewer, server):
    page = viewer
    page.goto(f"{server}/names/vision/compare?a=1&b=2")
    changes = {r[0]: r for r in _rows(page, "#changes")}
    assert changes["platforms"][2:] == ["['cpu']", "['cpu', 'tpu']", "compatible"]
    facts = {r[0]: r[1:] for r in _rows(page, "#facts")}
    assert facts["platforms"] == ["cpu", "cpu, tpu"]
    assert facts["signatures"] == ["[0][0]: float32[4] -> .: float32[4]"] * 2
    assert facts["custom-call targets"] == ["none", "none"]
    assert facts["metadata team"] == ["search", "—"]
    assert facts["description"][0].startswith("Encodes images for the search team.")
    audits = _rows(page, "#audits")
    assert ["cpu", NEW_JAX, "static", "unknown", "unknown"] in audits
    assert ["tpu", NEW_JAX, "static", "\N{EN DASH}", "not-run"] in audits
    page.click("text=swap")
    assert page.url == f"{server}/names/vision/compare?a=2&b=1"


@pytest.mark.parametrize(
    ("query", "status"), [("a=1&b=9", 404), ("a=1", 422), ("a=x&b=1", 422), ("a=0&b=1", 422)]
)
def test_compare_errors_are_pages(viewer, server, query, status):
    assert viewer.goto(f"{server}/names/vision/compare?{query}").status == status
    assert "signed in as viewer" in viewer.locator("header .who").inner_text()


# -- events ---------------------------------------------------------------------------------


def test_events_say_who_did_what_and_where_an_alias_moved(viewer, server):
    page = viewer
    page.goto(f"{server}/events")
    rows = _rows(page, "#events")
    assert all(ISO_UTC.match(r[1]) for r in rows)
    by_what = {(r[3], r[4]): r for r in rows}
    move = by_what[("alias", "vision:2")]
    assert move[5] == "moved an alias" and move[6] == "@prod: 1 → 2"
    first_push = by_what[("push", "vision:1")]
    assert first_push[5] == "pushed 1 variant" and first_push[6] == "@prod: — → 1"
    assert by_what[("push", "vision:2")][5:] == ["pushed 2 variants", ""]
    assert rows[0][3:] == ["token-create", "", "created token lm-only (read, names lm*)", ""]
    assert all(r[2].startswith("local:") for r in rows)


# -- error pages keep the signed-in state ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "title"),
    [
        ("/names/vision/99", 404, "Not found"),
        ("/no/such/page", 404, "Not found"),
        ("/names/vision/two", 422, "Bad request"),
        ("/search?platform=vax", 400, "Bad request"),
    ],
)
def test_an_error_page_shows_who_is_signed_in(viewer, server, path, status, title):
    page = viewer
    assert page.goto(f"{server}{path}").status == status
    assert page.locator("h1").inner_text() == title
    who = page.locator("header .who")
    assert "signed in as viewer" in who.inner_text() and who.locator("button").count() == 1
    assert page.locator("script").count() == 0
    who.locator("button").click()  # signing out works from an error page
    page.wait_for_url(f"{server}/login")


def test_a_403_page_shows_the_limited_token(context, server, filled):
    page = _sign_in(context, server, filled["secrets"]["lm-only"])
    assert page.goto(f"{server}/names/vision").status == 403
    assert "signed in as lm-only" in page.locator("header .who").inner_text()


def test_an_unknown_path_without_a_token_is_a_page_and_the_api_stays_json(context, server):
    page = context.new_page()
    answer = page.goto(f"{server}/no/such/page")
    assert answer.status == 404 and page.locator("h1").inner_text() == "Not found"
    assert page.locator("header .who").inner_text().strip() == "Sign in"
    api = context.request.get(f"{server}/api/v1/no/such")
    assert api.status == 404 and api.json()["error"]["type"] == "HTTPError"


@pytest.mark.parametrize(
    "path", ["/search?q=vision", "/names/vision/compare?a=1&b=2", "/names/vision/2", "/nope"]
)
def test_new_pages_have_the_no_script_policy(context, server, path):
    answer = context.new_page().goto(f"{server}{path}")
    csp = answer.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
