"""A real moto server process on loopback for tests of commands that call AWS (status, logs):
reached through AWS_ENDPOINT_URL, as a user's shell would reach AWS, and stopped afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3

REGION = "us-west-2"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MotoServer:
    def __init__(self, url: str) -> None:
        self.url = url

    def env(self, *, credentials: bool = True) -> dict[str, str]:
        """The environment of a CLI subprocess that reaches this server (and nothing else)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env |= {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        if credentials:
            env |= CREDENTIALS
        return env

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service, region_name=REGION, endpoint_url=self.url,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()


@contextmanager
def moto_server() -> Iterator[MotoServer]:
    """`python -m moto.server` bound to 127.0.0.1 on a free port; stopped on exit."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)
        yield MotoServer(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
