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

from google.oauth2 import service_account

from trio_batcher.simulator import SimulatorConfig
from trio_batcher.simulator.fleet import rsa_key_pair

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
    """A throwaway RSA key pair (private PEM, public PEM) for the service account: the
    simulator's own generator, made once per test run."""
    return rsa_key_pair()


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


def service_account_info(url: str) -> dict[str, str]:
    """The service-account JSON whose ``token_uri`` is the simulator at ``url``."""
    return {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "sim-key-1",
        "private_key": key_pair()[0],
        "client_email": EMAIL,
        "client_id": "1234567890",
        "token_uri": f"{url}/token",
    }


def service_account_credentials(url: str, tmp_path: Path) -> Any:
    """google-auth credentials from a service-account JSON whose ``token_uri`` is the
    simulator's token endpoint (written to disk as ``GOOGLE_APPLICATION_CREDENTIALS`` would
    be)."""
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps(service_account_info(url)))
    return service_account.Credentials.from_service_account_file(str(path), scopes=[SCOPE])
