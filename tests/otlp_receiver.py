"""A tiny OTLP/HTTP traces receiver on loopback: what the tracing tests export to.

It accepts ``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``, as the SDK's OTLP/HTTP
exporter sends it), keeps every body as received (the tests search the raw bytes for keys and
prompt text) and decodes the spans. It runs in a thread of its own: the SDK's export thread
posts to it with a blocking client, and the gateway under test runs on trio in the main thread.

Run it by hand for the docs/observability.md walk-through; it prints one line per span::

    python tests/otlp_receiver.py --port 4318

(``--discard``: answer every export without decoding it, the sink of the tracing overhead
measurement in docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


@dataclass
class ReceivedSpan:
    """One exported span, decoded: ids as hex, attributes as plain values."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[str]
    status_code: int
    resource: dict[str, Any]
    start_ns: int
    end_ns: int

    @classmethod
    def of(cls, span: Span, resource: dict[str, Any]) -> ReceivedSpan:
        return cls(
            name=span.name,
            kind=KINDS.get(span.kind, str(span.kind)),
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            attributes={a.key: _value(a.value) for a in span.attributes},
            events=[e.name for e in span.events],
            status_code=span.status.code,
            resource=resource,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
        )


@dataclass
class Receiver:
    """What arrived so far; ``url`` is the OTLP endpoint to export to."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    status: int = 200  # what to answer (a test of export failures sets 503)
    delay: float = 0.0  # seconds to take over each export (a slow collector)
    discard: bool = False  # answer without decoding or keeping anything (the bench's sink)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> list[ReceivedSpan]:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                found += [ReceivedSpan.of(s, resource) for s in scope_spans.spans]
        with self.lock:
            self.bodies.append(body)
            self.spans += found
        return found

    @property
    def raw(self) -> bytes:
        with self.lock:
            return b"".join(self.bodies)

    def named(self, name: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


def _handler(receiver: Receiver, echo: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if receiver.delay:
                time.sleep(receiver.delay)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            if receiver.status != 200:
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            spans = [] if receiver.discard else receiver.take(body)
            if echo:
                for span in spans:
                    print(_line(span), flush=True)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _line(span: ReceivedSpan) -> str:
    attributes = " ".join(f"{k}={v!r}" for k, v in sorted(span.attributes.items()))
    parent = span.parent_span_id or "-"
    return (
        f"{span.kind:<8} {span.name!r} trace={span.trace_id} span={span.span_id} "
        f"parent={parent} {(span.end_ns - span.start_ns) / 1e6:.1f}ms {attributes}"
    )


@contextmanager
def running_receiver(
    port: int = 0, *, echo: bool = False, discard: bool = False
) -> Iterator[Receiver]:
    """A receiver on ``127.0.0.1:port`` (0: any free port) for the block."""
    receiver = Receiver(discard=discard)
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(receiver, echo))
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--discard", action="store_true", help="answer, print nothing")
    args = parser.parse_args()
    with running_receiver(args.port, echo=not args.discard, discard=args.discard) as receiver:
        print(f"OTLP/HTTP traces receiver on {receiver.url}/v1/traces", flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
