"""A real S3 for the tests: moto's server in a subprocess, on 127.0.0.1 only, authenticating.

``s3_server`` (one per session) starts moto's server on a free port, behind the middleware of
``tests/_s3_moto.py`` (presigned URLs and ``x-amz-checksum-sha256`` checked as S3 does), waits
for it (at most ``START_TIMEOUT`` seconds), creates an IAM user whose access key may do every S3
action, then the bucket. Authentication is on from then (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``
lets only the three IAM calls through unsigned): a request with a wrong key or secret, or none,
is refused, so a test whose credentials do not reach the store fails. The server is stopped at
the end of the session. ``s3`` (one per test) is the same server with the ``AWS_*`` environment
cleared, botocore's files and instance metadata out of reach, and fsspec's cache of filesystems
emptied, so each test's credentials are the ones it gives.

Without moto (``pip install 'moto[server]'``, in the ``dev`` extra) the tests that use it skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["START_TIMEOUT", "S3Server", "s3", "s3_server"]

#: Seconds the server has to answer before the fixture fails.
START_TIMEOUT = 15.0
_REGION = "us-east-1"
#: moto's server with S3's checks of presigned URLs and checksums.
_MOTO = Path(__file__).with_name("_s3_moto.py")
_ALLOW_S3 = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


@dataclasses.dataclass(frozen=True)
class S3Server:
    """A running S3 (moto) at ``endpoint_url``, its ``bucket``, and an access key to it."""

    endpoint_url: str
    bucket: str
    key: str
    secret: str
    region: str = _REGION

    def url(self) -> str:
        """A fresh, empty prefix of the bucket: ``s3://<bucket>/<random>``."""
        return f"s3://{self.bucket}/{uuid.uuid4().hex}"

    def storage_options(self, **changes: Any) -> dict[str, Any]:
        """s3fs's options to reach the server with this access key (``changes`` replace)."""
        options = {
            "endpoint_url": self.endpoint_url,
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"region_name": self.region},
        }
        return options | changes

    def environ(self) -> dict[str, str]:
        """The environment variables botocore reads for the same access."""
        return {
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self) -> Any:
        """A boto3 S3 client, to look at and change the bucket behind a store's back."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name=self.region,
        )

    def keys(self, url: str) -> list[str]:
        """Every key under ``url``'s prefix, relative to it, sorted."""
        prefix = url.removeprefix(f"s3://{self.bucket}/").rstrip("/") + "/"
        pages = self.client().get_paginator("list_objects_v2")
        found = pages.paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"][len(prefix) :] for page in found for o in page.get("Contents", []))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_up(process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
    """Returns once the server answers; fails the fixture if it exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"moto's server exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):  # not an S3 call
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"moto's server did not answer within {START_TIMEOUT} s:\n{log.read_text()}")


def _provision(endpoint: str) -> tuple[str, str]:
    """The three unauthenticated calls: an IAM user allowed S3, and its access key."""
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="provisioning",
        aws_secret_access_key="provisioning",
        region_name=_REGION,
    )
    iam.create_user(UserName="jaxport-tests")
    iam.put_user_policy(
        UserName="jaxport-tests", PolicyName="s3", PolicyDocument=json.dumps(_ALLOW_S3)
    )
    key = iam.create_access_key(UserName="jaxport-tests")["AccessKey"]
    return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server, authenticating, with a bucket (see the module's docstring)."""
    pytest.importorskip("moto.server", reason="moto is not installed: pip install 'moto[server]'")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"  # _provision's calls
    with tempfile.TemporaryDirectory(prefix="jaxport-moto-") as tmp:
        log = Path(tmp) / "moto.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, str(_MOTO), "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp,
            )
        try:
            _wait_until_up(process, endpoint, log)
            key, secret = _provision(endpoint)
            server = S3Server(endpoint, "jaxport-tests", key, secret)
            server.client().create_bucket(Bucket=server.bucket)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    """``s3_server`` for one test: no ``AWS_*`` variable of the caller, no ``~/.aws`` files,
    no instance metadata lookups, and a fresh s3fs filesystem for each store."""
    import s3fs

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()
