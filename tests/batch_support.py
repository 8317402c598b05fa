"""What the Batch API's poller tests share: the model they name, the final statuses, and a
line of an input file."""

from __future__ import annotations

import json

MODEL = "claude-sonnet-4-5"
FINAL = {"completed", "failed", "expired", "cancelled"}


def line(custom_id: str, n: int) -> bytes:
    """One ``/v1/chat/completions`` request of an input file, saying hello ``n``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Say hello #{n}"}]}
    entry = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return json.dumps({**entry, "body": body}).encode() + b"\n"
