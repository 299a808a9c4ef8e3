"""The schedules of the audit queue's periodic tasks (``registry/_cron.py``): retention's
``$JAXPORT_RETAIN_CRON`` and the watcher's ``$JAXPORT_WATCH_CRON``, read and checked by one
function. No database: a stand-in for procrastinate's ``App`` records what is registered."""

from __future__ import annotations

from typing import Any

import pytest

from jaxport import InvalidNameError
from jaxport.registry._cron import schedule
from jaxport.registry._retention_queue import RETAIN_CRON, register_retention
from jaxport.registry._watch_queue import register_watch


class App:
    """procrastinate's ``App`` as the registering functions use it: the periodic schedules."""

    def __init__(self) -> None:
        self.periodic_tasks: dict[str, str] = {}

    def task(self, **options: Any) -> Any:
        return lambda function: function

    def periodic(self, *, cron: str, periodic_id: str) -> Any:
        self.periodic_tasks[periodic_id] = cron
        return lambda task: task


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "17 3 * * *"),
        ("", "17 3 * * *"),
        ("  ", "17 3 * * *"),
        ("off", None),
        ("OFF", None),
        ("23 * * * *", "23 * * * *"),
        (" */5 * * * * * ", "*/5 * * * * *"),
    ],
)
def test_schedule_reads_the_variable(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("JAXPORT_TEST_CRON", raising=False)
    else:
        monkeypatch.setenv("JAXPORT_TEST_CRON", value)
    assert schedule("JAXPORT_TEST_CRON", "17 3 * * *") == expected


@pytest.mark.parametrize("value", ["hourly", "* * * *", "* * * * * * *", "* " * 99 + "*"])
def test_schedule_refuses_what_is_no_cron_expression(monkeypatch, value):
    monkeypatch.setenv("JAXPORT_TEST_CRON", value)
    with pytest.raises(InvalidNameError, match=r"^JAXPORT_TEST_CRON must be a cron expression"):
        schedule("JAXPORT_TEST_CRON", "off")


def test_both_periodic_tasks_read_their_schedule_alike(monkeypatch):
    for value in ("", "off"):  # empty is the default: retention daily, no watch
        monkeypatch.setenv("JAXPORT_RETAIN_CRON", value)
        monkeypatch.setenv("JAXPORT_WATCH_CRON", value)
        app = App()
        register_retention(app, None, "audit-cpu")  # type: ignore[arg-type]
        register_watch(app, None, "audit-cpu")  # type: ignore[arg-type]
        assert app.periodic_tasks == ({"retain": RETAIN_CRON} if value == "" else {})
    monkeypatch.setenv("JAXPORT_RETAIN_CRON", "0 4 * * *")
    monkeypatch.setenv("JAXPORT_WATCH_CRON", "23 * * * *")
    app = App()
    register_retention(app, None, "audit-cpu")  # type: ignore[arg-type]
    register_watch(app, None, "audit-cpu")  # type: ignore[arg-type]
    assert app.periodic_tasks == {"retain": "0 4 * * *", "watch": "23 * * * *"}
    for env in ("JAXPORT_RETAIN_CRON", "JAXPORT_WATCH_CRON"):
        monkeypatch.setenv(env, "daily")
        with pytest.raises(InvalidNameError, match=f"^{env} must be a cron expression"):
            register = register_retention if "RETAIN" in env else register_watch
            register(App(), None, "audit-cpu")  # type: ignore[arg-type]
        monkeypatch.delenv(env)
