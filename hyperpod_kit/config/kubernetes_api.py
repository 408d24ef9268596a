"""A small client of a Kubernetes API server: GET, POST, DELETE and streamed GET (pod logs), as
JSON over HTTPS with a bearer token, the standard library only (no kubernetes client: `job`
runs in a Studio space with the package installed `--no-deps`).

`AwsFacade.kubernetes(cluster)` gives one for an EKS cluster (endpoint and CA from
eks:DescribeCluster, the token `aws eks get-token` makes); tests give it a loopback server.
A refusal is `KubernetesApiError` (an `AwsUnavailableError` whose `code` is the HTTP status),
with the API's own message (its `Status` object) where it sent one.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from hyperpod_kit.config.aws_errors import AwsUnavailableError

TIMEOUT_S = 30.0


class KubernetesApiError(AwsUnavailableError):
    """The API refused (`code`: the HTTP status, "401", "403", "404", "422", ...; `api_message`:
    the message of the `Status` it answered with, "" when it sent none) or could not be reached
    (`code` "")."""

    def __init__(self, message: str, code: str = "", api_message: str = "") -> None:
        super().__init__(message, code)
        self.api_message = api_message


class KubernetesApi:
    """The Kubernetes API at `endpoint` (https://... with `ca_data`, the base64 PEM of its CA,
    as kubeconfig and eks:DescribeCluster carry it; http://... in tests); `token()` gives the
    bearer token for each request (EKS tokens last 15 minutes, a followed log longer)."""

    def __init__(
        self,
        endpoint: str,
        token: Callable[[], str],
        ca_data: str | None = None,
        *,
        name: str = "",
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self._ca_data = ca_data
        self._context: ssl.SSLContext | None = None
        self.name = name or self.endpoint
        self.timeout_s = timeout_s

    def get(self, path: str) -> Any:
        """The JSON answer to GET `path` (such as /api/v1/namespaces/NS/pods?labelSelector=...)."""
        return self._json("GET", path)

    def post(self, path: str, body: Any) -> Any:
        """POST the JSON `body` to `path` (create an object); the object as the API stored it."""
        return self._json("POST", path, body)

    def delete(self, path: str) -> Any:
        """DELETE `path`; the API's answer (the object being deleted, or a Status)."""
        return self._json("DELETE", path)

    def stream(self, path: str, *, timeout_s: float | None = None) -> Iterator[str]:
        """The lines of a text answer as they come (a pod's log; with ?follow=true, until the
        container ends or the server closes the stream), without their line ends. `timeout_s`:
        how long a read may wait (None: this client's timeout)."""
        with self._open("GET", path, accept="*/*", timeout_s=timeout_s) as answer:
            what = self._what("GET", path)
            try:
                for raw in answer:
                    yield raw.decode("utf-8", "replace").rstrip("\r\n")
            except OSError as e:  # a reset or a read that timed out
                raise KubernetesApiError(f"{what}: {e}") from None

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        with self._open(method, path, body=body) as answer:
            data = answer.read()
        try:
            return json.loads(data) if data.strip() else None
        except ValueError:
            raise KubernetesApiError(
                f"{self._what(method, path)}: the answer is not JSON"
            ) from None

    def _what(self, method: str, path: str) -> str:
        return f"Kubernetes API of {self.name} {method} {path}"

    def _open(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        accept: str = "application/json",
        timeout_s: float | None = None,
    ) -> Any:
        what = self._what(method, path)
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.endpoint + path, data=data, headers=headers, method=method
        )
        try:
            return urllib.request.urlopen(
                request, timeout=timeout_s or self.timeout_s, context=self._ssl()
            )
        except urllib.error.HTTPError as e:
            message = _status_message(e)
            detail = f"HTTP {e.code} {e.reason}" + (f": {message}" if message else "")
            raise KubernetesApiError(f"{what}: {detail}", str(e.code), message) from None
        except (OSError, ValueError) as e:  # URLError and SSLError are OSErrors
            raise KubernetesApiError(f"{what}: {e}") from None

    def _ssl(self) -> ssl.SSLContext | None:
        """The cluster's own CA for its https endpoint (a bad one is an SSLError: OSError)."""
        if not self.endpoint.startswith("https://"):
            return None
        if self._context is None:
            try:
                ca = base64.b64decode(self._ca_data).decode() if self._ca_data else None
                self._context = ssl.create_default_context(cadata=ca)
            except (ValueError, ssl.SSLError) as e:
                raise KubernetesApiError(f"Kubernetes API of {self.name}: its CA: {e}") from None
        return self._context


def _status_message(error: urllib.error.HTTPError) -> str:
    """The message of the `Status` object the API sends with a refusal ("" when it sent none),
    on one line."""
    try:
        status = json.loads(error.read() or b"{}")
    except (OSError, ValueError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return " ".join(str(message).split()) if message else ""
