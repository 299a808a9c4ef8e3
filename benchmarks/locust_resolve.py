"""Locust user for ``bench_server.py``: resolves one name through the server, as fast as it
answers (token from ``$JAXPORT_TOKEN``)."""

from __future__ import annotations

import os

from locust import FastHttpUser, constant, task


class Resolver(FastHttpUser):  # type: ignore[misc]
    wait_time = constant(0)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {os.environ['JAXPORT_TOKEN']}"}

    @task
    def resolve(self) -> None:
        self.client.get("/api/v1/resolve?reference=bench&platform=cpu", headers=self.headers)
