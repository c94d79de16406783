"""An S3 server on loopback for the object-store option of workspaces: moto's server, a
real HTTP server speaking the S3 protocol (no AWS account; nothing leaves the machine).

The processes a test starts find it as every S3 client does, through ``AWS_*`` variables
(``S3_ENVIRONMENT``), which the fixture sets in this process's environment too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.helpers.pg_pair import free_port

BUCKET = "brainhands-test"


def s3_environment(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "brainhands",
        "AWS_SECRET_ACCESS_KEY": "brainhands-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


@contextlib.contextmanager
def s3_server(log: Path) -> Iterator[str]:
    """A running S3 server with the bucket ``BUCKET``; its endpoint."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.put(f"{endpoint}/{BUCKET}", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def s3_in_environment(endpoint: str) -> Iterator[None]:
    """``AWS_*`` set to reach ``endpoint`` while the block runs."""
    saved = dict(os.environ)
    os.environ.update(s3_environment(endpoint))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
