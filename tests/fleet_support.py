"""A gateway in front of one simulated upstream of any kind: Anthropic, Bedrock or Vertex.

``gateway_and_simulator(kind, config, **settings)`` is ``support.proxy_and_simulator`` for
every kind: for a cloud it gives the simulator the cloud identities (``cloud_support``),
writes an ``UPSTREAMS_FILE`` naming it, and puts the credentials where the standard chains
look -- AWS keys in the environment (and no shared config, no instance metadata), a Google
service-account file in ``GOOGLE_APPLICATION_CREDENTIALS`` -- so the gateway finds them as
it would in production. The environment is restored afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from cloud_support import (
    ACCESS_KEY,
    BEDROCK_MODEL,
    PROJECT,
    REGION,
    SECRET_KEY,
    VERTEX_MODEL,
    VERTEX_REGION,
    cloud_config,
    service_account_info,
)
from support import Sim, proxy_and_simulator, running_proxy, running_simulator

from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig

KINDS = ("anthropic", "bedrock", "vertex")
MODELS = {"bedrock": BEDROCK_MODEL, "vertex": VERTEX_MODEL}


@contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the block."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cloud_upstream(kind: str, url: str, name: str = "cloud") -> str:
    """One ``[[upstream]]`` table for the simulated ``kind`` at ``url``."""
    models = {
        model: MODELS[kind]
        for model in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-haiku-4-5")
    }
    if kind == "bedrock":
        where = f'region = "{REGION}"\nbase_url = "{url}"'
    else:
        where = f'project = "{PROJECT}"\nregion = "{VERTEX_REGION}"\nbase_url = "{url}/v1"'
    table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in models.items())
    return f'[[upstream]]\nname = "{name}"\nkind = "{kind}"\n{where}\nmodels = {{ {table} }}\n'


def cloud_environment(home: Path, url: str) -> dict[str, str | None]:
    """The variables the AWS chain and Application Default Credentials read, pointing at
    the simulator's identities and nowhere else."""
    account = service_account_info(url)
    path = home / "service-account.json"
    path.write_text(json.dumps(account))
    path.chmod(0o600)
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "GOOGLE_APPLICATION_CREDENTIALS": str(path),
        "GCE_METADATA_HOST": "127.0.0.1:9",  # never the network, should ADC look there
        "NO_GCE_CHECK": "True",
    }


@asynccontextmanager
async def gateway_and_simulator(
    kind: str, config: SimulatorConfig | None = None, **changes: Any
) -> AsyncIterator[tuple[str, Sim]]:
    """The gateway's base URL and its one simulated upstream, of ``kind``."""
    if kind == "anthropic":
        async with proxy_and_simulator(config, **changes) as pair:
            yield pair
        return
    identities = dataclasses.asdict(cloud_config())
    fields = {k: v for k, v in identities.items() if k.startswith(("aws_", "vertex_"))}
    simulated = dataclasses.replace(config or SimulatorConfig(), **fields)
    with tempfile.TemporaryDirectory() as home:
        async with running_simulator(simulated) as sim:
            path = Path(home) / "upstreams.toml"
            path.write_text(cloud_upstream(kind, sim.url))
            with environment(cloud_environment(Path(home), sim.url)):
                settings = Settings(
                    upstreams_file=str(path), data_dir=str(Path(home) / "data")
                ).replace(**changes)
                async with running_proxy(settings) as url:
                    yield url, sim
