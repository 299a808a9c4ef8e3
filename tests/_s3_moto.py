"""moto's S3 server, with what S3 does to presigned URLs and checksums that moto 5 does not.

Run as ``python tests/_s3_moto.py -H HOST -p PORT`` (``tests/_s3.py`` starts it). moto's
authentication (``INITIAL_NO_AUTH_ACTION_COUNT``) checks the ``Authorization`` header only: a
presigned request (AWS Signature Version 4, query-string form) fails inside moto, and moto
stores an ``x-amz-checksum-sha256`` without computing it (its code says TODO). This WSGI
middleware in front of moto does what S3 does
(https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html,
https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html):

- a presigned request whose signature is not the one its access key makes over its method,
  path, query and signed headers is refused, 403 ``SignatureDoesNotMatch``; one past
  ``X-Amz-Date`` + ``X-Amz-Expires``, 403 ``AccessDenied`` "Request has expired";
- a PUT whose body's sha256 is not its ``x-amz-checksum-sha256`` is refused, 400 ``BadDigest``;
- an accepted presigned request is handed to moto signed again in header form with the same
  key (so moto's own authorization applies), with ``x-amz-sdk-checksum-algorithm: SHA256``
  where it carries a checksum (so moto records it, as S3 does for the header alone).
"""

from __future__ import annotations

import argparse
import base64
import calendar
import hashlib
import hmac
import io
import os
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, quote

_AUTH_PARAMS = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}  # fmt: skip


def _error(start: Callable[..., Any], status: str, code: str, message: str) -> list[bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()  # fmt: skip
    start(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _secret(access_key: str) -> str | None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.iam.access_control import IAMUserAccessKey

    try:
        key = IAMUserAccessKey(DEFAULT_ACCOUNT_ID, "aws", access_key, {})
    except Exception:
        return None
    return str(key.create_credentials().secret_key)


def _header(environ: dict[str, Any], name: str) -> str:
    if name == "content-type":
        return str(environ.get("CONTENT_TYPE", ""))
    if name == "content-length":
        return str(environ.get("CONTENT_LENGTH", ""))
    return str(environ.get("HTTP_" + name.upper().replace("-", "_"), ""))


def _signature(environ: dict[str, Any], query: list[tuple[str, str]], secret: str) -> str:
    """The Signature Version 4 (query form) of the request, with ``secret``."""
    params = dict(query)
    signed = params["X-Amz-SignedHeaders"].split(";")
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, v in sorted(query) if k != "X-Amz-Signature"
    )  # fmt: skip
    path = str(environ.get("RAW_URI") or environ.get("PATH_INFO", "/")).split("?", 1)[0]
    headers = "".join(f"{h}:{' '.join(_header(environ, h).split())}\n" for h in signed)
    canonical = "\n".join([environ["REQUEST_METHOD"], path, canonical_query, headers,
                           ";".join(signed), "UNSIGNED-PAYLOAD"])  # fmt: skip
    _, day, region, service, terminal = params["X-Amz-Credential"].split("/")
    scope = f"{day}/{region}/{service}/{terminal}"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", params["X-Amz-Date"], scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])  # fmt: skip
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, terminal):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _resign(environ: dict[str, Any], query: list[tuple[str, str]], access: str, secret: str,
            body: bytes) -> None:  # fmt: skip
    """Turns the accepted presigned request into a header-signed one, in place."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials

    params = dict(query)
    rest = [(k, v) for k, v in query if k not in _AUTH_PARAMS]
    environ["QUERY_STRING"] = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in rest)
    if _header(environ, "x-amz-checksum-sha256"):
        environ["HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM"] = "SHA256"
    path = str(environ.get("RAW_URI") or environ.get("PATH_INFO", "/")).split("?", 1)[0]
    host = _header(environ, "host")
    # https and payload signing off: UNSIGNED-PAYLOAD, as the presigned URL was (the body is
    # not hashed again: the scheme is not part of the signature)
    url = f"https://{host}{path}" + (f"?{environ['QUERY_STRING']}" if rest else "")
    names = ["host", "x-amz-checksum-sha256", "x-amz-sdk-checksum-algorithm", "range",
             "content-type"]  # fmt: skip
    headers = {n: _header(environ, n) for n in names if _header(environ, n)}
    request = AWSRequest(method=environ["REQUEST_METHOD"], url=url, data=body, headers=headers)
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    region = params["X-Amz-Credential"].split("/")[2]
    S3SigV4Auth(Credentials(access, secret), "s3", region).add_auth(request)
    for name, value in request.headers.items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value


class StrictS3:
    """The middleware (see the module's doc)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qsl(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
        params = dict(query)
        body = b""
        if environ["REQUEST_METHOD"] in ("PUT", "POST"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
        if "X-Amz-Signature" in params:
            access = params.get("X-Amz-Credential", "").split("/")[0]
            secret = _secret(access)
            if secret is None:
                return _error(start, "403 Forbidden", "InvalidAccessKeyId", "unknown key")
            if not hmac.compare_digest(_signature(environ, query, secret),
                                       params["X-Amz-Signature"]):  # fmt: skip
                return _error(start, "403 Forbidden", "SignatureDoesNotMatch", "bad signature")
            signed_at = calendar.timegm(time.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
            if time.time() > signed_at + int(params["X-Amz-Expires"]):
                return _error(start, "403 Forbidden", "AccessDenied", "Request has expired")
            _resign(environ, query, access, secret, body)
        checksum = _header(environ, "x-amz-checksum-sha256")
        if environ["REQUEST_METHOD"] == "PUT" and checksum:
            found = base64.b64encode(hashlib.sha256(body).digest()).decode()
            if found != checksum:
                message = "The SHA256 you specified did not match the calculated checksum."
                return _error(start, "400 Bad Request", "BadDigest", message)
        return self.app(environ, start)


def main() -> None:
    from moto.moto_server.threaded_moto_server import MotoRequestHandler
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, StrictS3(app), threaded=True,
               request_handler=MotoRequestHandler)  # fmt: skip


if __name__ == "__main__":
    main()
