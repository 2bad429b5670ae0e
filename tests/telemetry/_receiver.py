"""A small OTLP/HTTP receiver for tests: protobuf or JSON bodies on loopback, decoded with
``opentelemetry-proto`` the way a collector does."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_TYPES: dict[str, type[Message]] = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
}
_HEX_IDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON writes ids as hex; the generic protobuf JSON mapping wants base64."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in _HEX_IDS and isinstance(v, str)
            else _hex_ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def decode_json(path: str, body: bytes) -> Message:
    """An OTLP/JSON body as its protobuf message (strict: unknown fields are an error)."""
    message = _TYPES[path]()
    json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), message)
    return message


class Receiver:
    def __init__(self) -> None:
        self.received: dict[str, list[Message]] = {path: [] for path in _TYPES}
        self.lock = threading.Lock()
        self.url = ""

    def messages(self, path: str) -> list[Message]:
        with self.lock:
            return list(self.received[path])

    def post_json(self, path: str, body: str) -> int:
        """POST an OTLP/JSON body as an exporter would; the HTTP status."""
        request = urllib.request.Request(
            f"{self.url}{path}", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            kind = _TYPES.get(self.path)
            if kind is None:
                self.send_response(404)
                self.end_headers()
                return
            if self.headers.get("Content-Type", "").startswith("application/json"):
                message = decode_json(self.path, body)
            else:
                message = kind.FromString(body)
            with receiver.lock:
                receiver.received[self.path].append(message)
            answer = b""  # an empty Export*ServiceResponse
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
