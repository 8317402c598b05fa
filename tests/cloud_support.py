"""The simulator as Bedrock and Vertex, and the identities that call it: shared by the
simulator's cloud tests (with the ``anthropic`` SDK's cloud clients) and the gateway's own
cloud clients' tests.

The AWS identity is a fixed key pair; the Google one a service account whose throwaway RSA
key the simulator's ``/token`` endpoint verifies (its ``token_uri`` points there).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from trio_batcher.simulator import SimulatorConfig

ACCESS_KEY = "AKIATESTCLOUDSIM0001"
SECRET_KEY = "test-secret-never-echoed"
REGION = "us-west-2"
PROJECT = "sim-project-1"
VERTEX_REGION = "us-east5"
EMAIL = "gateway@sim-project-1.iam.gserviceaccount.com"
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use get_weather."}]


@cache
def key_pair() -> tuple[str, str]:
    """A throwaway RSA key pair (private PEM, public PEM) for the service account."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def cloud_config(**changes: Any) -> SimulatorConfig:
    """A simulator that knows the AWS identity and the Google service account."""
    values: dict[str, Any] = {
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "aws_region": REGION,
        "vertex_project": PROJECT,
        "vertex_region": VERTEX_REGION,
        "vertex_client_email": EMAIL,
        "vertex_public_key_pem": key_pair()[1],
    }
    values.update(changes)
    return SimulatorConfig(**values)


def service_account_credentials(url: str, tmp_path: Path) -> Any:
    """google-auth credentials from a service-account JSON whose ``token_uri`` is the
    simulator's token endpoint (written to disk as ``GOOGLE_APPLICATION_CREDENTIALS`` would
    be)."""
    info = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "sim-key-1",
        "private_key": key_pair()[0],
        "client_email": EMAIL,
        "client_id": "1234567890",
        "token_uri": f"{url}/token",
    }
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps(info))
    return service_account.Credentials.from_service_account_file(str(path), scopes=[SCOPE])
