"""config.kubernetes_api against a loopback HTTP server: what each verb sends and reads, and how
a refusal or a dead endpoint becomes one `AwsUnavailableError` with the HTTP status as its code."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hyperpod_kit.config.aws import AwsUnavailableError
from hyperpod_kit.config.kubernetes_api import KubernetesApi, KubernetesApiError


class Server:
    """Answers each request with the next of `answers` (status, content type, body) and keeps
    (method, path, headers, body) of each request."""

    def __init__(self, *answers: tuple[int, str, bytes]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.seen.append((self.command, self.path, dict(self.headers), body))
                code, kind, data = server.answers.pop(0)
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def do_DELETE(self) -> None:
                self.answer()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.http.server_address[1]}/"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(*answers: tuple[int, str, bytes]) -> tuple[Server, KubernetesApi]:
        server = Server(*answers)
        servers.append(server)
        tokens = iter(f"token-{i}" for i in range(100))
        return server, KubernetesApi(server.endpoint, lambda: next(tokens), None, name="c1")

    yield start
    for server in servers:
        server.close()


def ok(body: Any) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(body).encode()


def refused(code: int, message: str) -> tuple[int, str, bytes]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": "X", "code": code}  # fmt: skip
    return code, "application/json", json.dumps(body).encode()


def test_get_post_delete_send_json_with_a_fresh_token_each(serve: Any) -> None:
    server, api = serve(ok({"items": [1]}), (201, "application/json", b'{"made": true}'),
                        ok({"kind": "Status", "status": "Success"}))  # fmt: skip
    assert api.get("/api/v1/nodes?labelSelector=a%3Db") == {"items": [1]}
    assert api.post("/apis/g/v1/namespaces/n/things", {"kind": "Thing", "n": [1, 2]}) == {
        "made": True
    }
    assert api.delete("/apis/g/v1/namespaces/n/things/x") == {"kind": "Status",
                                                              "status": "Success"}  # fmt: skip
    (m1, p1, h1, b1), (m2, p2, h2, b2), (m3, p3, h3, _) = server.seen
    assert (m1, p1, b1) == ("GET", "/api/v1/nodes?labelSelector=a%3Db", b"")
    assert (m2, p2) == ("POST", "/apis/g/v1/namespaces/n/things")
    assert json.loads(b2) == {"kind": "Thing", "n": [1, 2]}
    assert h2["Content-Type"] == "application/json"
    assert (m3, p3) == ("DELETE", "/apis/g/v1/namespaces/n/things/x")
    # the endpoint's trailing slash is not doubled; each request asks for its own token
    assert [h["Authorization"] for h in (h1, h2, h3)] == [
        "Bearer token-0", "Bearer token-1", "Bearer token-2"]  # fmt: skip
    assert h1["Accept"] == "application/json"


def test_stream_gives_lines_as_text(serve: Any) -> None:
    log = b'plain line\r\n{"event": "step", "step": 3}\nno newline at the end'
    server, api = serve((200, "text/plain", log))
    lines = list(api.stream("/api/v1/namespaces/n/pods/p/log?follow=true"))
    assert lines == ["plain line", '{"event": "step", "step": 3}', "no newline at the end"]
    assert server.seen[0][2]["Accept"] == "*/*"


@pytest.mark.parametrize("code", [401, 403, 404, 409, 422, 500])
def test_a_refusal_is_one_error_with_the_status_and_the_apis_message(serve: Any, code: int) -> None:
    _, api = serve(refused(code, 'things "x" is\n  invalid: spec.a: Required value'))
    with pytest.raises(AwsUnavailableError) as caught:
        api.get("/apis/g/v1/namespaces/n/things/x")
    e = caught.value
    assert isinstance(e, KubernetesApiError)
    assert e.code == str(code)
    assert e.api_message == 'things "x" is invalid: spec.a: Required value'  # one line
    assert str(e).startswith(f"Kubernetes API of c1 GET /apis/g/v1/namespaces/n/things/x: "
                             f"HTTP {code} ")  # fmt: skip
    assert "\n" not in str(e)


def test_a_refusal_without_a_status_body_still_names_the_code(serve: Any) -> None:
    _, api = serve((403, "text/html", b"<html>no</html>"))
    with pytest.raises(KubernetesApiError) as caught:
        list(api.stream("/api/v1/namespaces/n/pods/p/log"))
    assert (caught.value.code, caught.value.api_message) == ("403", "")
    assert "HTTP 403 Forbidden" in str(caught.value)


def test_an_answer_that_is_not_json_is_an_error_and_an_empty_one_is_none(serve: Any) -> None:
    _, api = serve((200, "text/html", b"<html>proxy</html>"), (200, "application/json", b""))
    with pytest.raises(KubernetesApiError, match="not JSON") as caught:
        api.get("/version")
    assert caught.value.code == ""
    assert api.delete("/apis/g/v1/namespaces/n/things/x") is None


def test_no_route_is_an_error_without_a_code() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = KubernetesApi(f"http://127.0.0.1:{port}", lambda: "t", None, timeout_s=5)
    with pytest.raises(AwsUnavailableError) as caught:
        api.get("/api/v1/nodes")
    assert caught.value.code == ""
    assert "refused" in str(caught.value).lower()


def test_a_ca_that_is_not_a_certificate_is_an_error_before_any_request() -> None:
    bad = base64.b64encode(b"not a certificate").decode()
    api = KubernetesApi("https://127.0.0.1:1", lambda: "t", bad, name="c1")
    with pytest.raises(KubernetesApiError, match="Kubernetes API of c1: its CA"):
        api.get("/api/v1/nodes")
