"""Requests to a dashboard server as a browser (or another site) would send them."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass

from payloadstore.dashboard import CSRF_HEADER, Dashboard


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    text: str
    content: bytes = b""

    def json(self) -> dict:
        return json.loads(self.text)


def request(
    server: Dashboard,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    host: str | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    sent = {"Host": host or f"127.0.0.1:{server.port}", **(headers or {})}
    conn.request(method, path, body=body, headers=sent)
    response = conn.getresponse()
    raw = response.read()
    answer = Answer(
        response.status,
        {k.lower(): v for k, v in response.getheaders()},
        raw.decode(errors="replace"),
        raw,
    )
    conn.close()
    return answer


def post(server: Dashboard, path: str, body: dict | None = None, **headers: str) -> Answer:
    base = {
        "Origin": f"http://127.0.0.1:{server.port}",
        "Content-Type": "application/json",
        CSRF_HEADER: server.csrf_token,
    }
    base.update({k.replace("_", "-"): v for k, v in headers.items()})
    sent = {k: v for k, v in base.items() if v != ""}
    return request(server, "POST", path, json.dumps(body or {}).encode(), headers=sent)
