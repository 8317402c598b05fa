"""Several simulated upstreams at once, each its own simulator, and how a gateway finds them.

A gateway routing across upstreams (``UPSTREAMS_FILE``, docs/upstreams.md) is tried
offline against a *fleet*: one simulator per upstream, each with its own state and port on
loopback, so one can be overloaded alone (``POST /_sim/overload``) while the others serve.
``run_simulated_upstreams`` starts them and reports a ``SimulatedFleet``; the fleet says
what a gateway needs to use them:

* ``upstreams_toml()``: the ``[[upstream]]`` tables describing them, every one of priority
  0 and weight 1, each kind's ``base_url`` in its SDK's convention (``Anthropic``'s and
  ``AnthropicBedrock``'s host root, ``AnthropicVertex``'s URL ending in ``/v1``), and for the
  cloud kinds a ``models`` table mapping every model the simulator lists
  (``models.CATALOGUE``, dated ids and their undated aliases) to the cloud's id for it;
* ``environment(directory)``: the variables through which the gateway's standard
  credential chains find the simulated identity -- ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` for Bedrock; ``GOOGLE_APPLICATION_CREDENTIALS``
  naming a service-account JSON (written there, mode 0600) whose ``token_uri`` is a
  simulated Vertex's ``/token`` and whose private key is the one the simulators verify
  assertions with; ``SIM_ANTHROPIC_API_KEY`` for the anthropic kind (a variable of its own,
  so that exporting it never clobbers a real ``ANTHROPIC_API_KEY``) -- and
  ``prepare_environment`` writes the upstreams file beside it and adds ``UPSTREAMS_FILE``.

The identity (``CloudIdentity``) is made fresh for each fleet: random AWS keys, and an RSA
key pair generated with ``cryptography`` (google-auth's own dependency, the ``vertex``
extra) when a Vertex upstream is asked for. Its ``repr`` shows no secret; nothing here
prints or logs one. Every simulator of a fleet knows the same identity and shares one
Google token store, as Google's one token endpoint serves every Vertex region.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Final, final

import trio

from ..upstream.kinds.extras import MissingExtraError, require_extra
from ..upstreams.config import KINDS
from .app import run_simulator
from .config import SimulatorConfig
from .google_tokens import GoogleTokens
from .models import CATALOGUE

__all__ = [
    "SIM_API_KEY",
    "SIM_KEY_ENV",
    "UNSET_ENV",
    "CloudIdentity",
    "SimulatedFleet",
    "SimulatedUpstream",
    "bedrock_model_id",
    "parse_kinds",
    "prepare_environment",
    "require_kinds",
    "run_simulated_upstreams",
    "served_models",
    "vertex_model_id",
    "write_private",
]

SIM_KEY_ENV: Final = "SIM_ANTHROPIC_API_KEY"
"""The variable the generated anthropic upstreams name as ``api_key_env``."""
SIM_API_KEY: Final = "sk-ant-simulated-local"
"""Its value: any non-empty key is accepted by a simulator (no secret)."""
SERVICE_ACCOUNT_FILE: Final = "google-service-account.json"
UPSTREAMS_FILE: Final = "upstreams.toml"
DEFAULT_VERTEX_REGION: Final = "us-east5"
UNSET_ENV: Final = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
"""Variables that would make the AWS chain sign as someone else (a profile of the shared
config, a session token that does not belong to the simulated keys): a process adopting a
fleet's ``environment`` removes them."""
_DATE: Final = 8


def parse_kinds(text: str) -> tuple[str, ...]:
    """``"anthropic,bedrock,vertex"`` as kinds, in order (repeats allowed).

    Raises:
      ValueError: an empty list or an unknown kind, with the kinds known.
    """
    kinds = tuple(part.strip() for part in text.split(","))
    known = ", ".join(KINDS)
    if not any(kinds):
        raise ValueError(f"expected a comma-separated list of kinds ({known})")
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown upstream kind {kind!r} (known: {known})")
    return kinds


def require_kinds(kinds: Sequence[str]) -> None:
    """Check that what the simulated clouds need is installed: botocore (signatures) for
    Bedrock, google-auth and ``cryptography`` (the service-account key) for Vertex.

    Raises:
      MissingExtraError: naming the pip command (``pip install 'trio-batcher[vertex]'``).
    """
    for kind in dict.fromkeys(kinds):
        require_extra(kind)
        if kind == "vertex" and importlib.util.find_spec("cryptography") is None:
            raise MissingExtraError("vertex", "vertex", "cryptography", "cryptography")


def _split_date(model_id: str) -> tuple[str, str | None]:
    name, _, tail = model_id.rpartition("-")
    if name and len(tail) == _DATE and tail.isdigit():
        return name, tail
    return model_id, None


def bedrock_model_id(model_id: str) -> str:
    """Bedrock's id for an Anthropic model id (``anthropic.<id>-v1:0``)."""
    return f"anthropic.{model_id}-v1:0"


def vertex_model_id(model_id: str) -> str:
    """Vertex AI's name for an Anthropic model id (``claude-x-y@YYYYMMDD``, or as it is)."""
    name, date = _split_date(model_id)
    return model_id if date is None else f"{name}@{date}"


def served_models() -> tuple[tuple[str, str], ...]:
    """Every model name a client may send for the catalogue's models, with the Anthropic id
    it stands for: each id, and a dated id's undated alias too."""
    names: dict[str, str] = {}
    for entry in CATALOGUE:
        model_id = entry[0]
        names.setdefault(model_id, model_id)
        alias, date = _split_date(model_id)
        if date is not None:
            names.setdefault(alias, model_id)
    return tuple(names.items())


@final
@dataclass(frozen=True, slots=True)
class CloudIdentity:
    """The one AWS identity and Google service account every simulator of a fleet knows.

    ``repr`` shows neither secret nor key.
    """

    aws_access_key_id: str
    aws_secret_access_key: str = field(repr=False)
    aws_region: str
    vertex_project: str
    vertex_region: str
    vertex_client_email: str
    vertex_private_key_pem: str | None = field(default=None, repr=False)
    vertex_public_key_pem: str | None = field(default=None, repr=False)

    @classmethod
    def generate(
        cls,
        *,
        vertex_key: bool,
        aws_region: str = "us-east-1",
        vertex_project: str = "simulated-project",
        vertex_region: str = DEFAULT_VERTEX_REGION,
    ) -> CloudIdentity:
        """A fresh identity: random AWS keys and, with ``vertex_key``, an RSA key pair.

        Raises:
          ModuleNotFoundError: ``vertex_key`` without ``cryptography`` installed (the
            ``vertex`` extra brings it).
        """
        alphabet = string.ascii_uppercase + string.digits
        access = "AKIASIM" + "".join(secrets.choice(alphabet) for _ in range(13))
        secret = base64.b64encode(secrets.token_bytes(30)).decode()
        private = public = None
        if vertex_key:
            private, public = rsa_key_pair()
        return cls(
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            aws_region=aws_region,
            vertex_project=vertex_project,
            vertex_region=vertex_region,
            vertex_client_email=f"trio-batcher@{vertex_project}.iam.gserviceaccount.com",
            vertex_private_key_pem=private,
            vertex_public_key_pem=public,
        )

    def configure(self, config: SimulatorConfig) -> SimulatorConfig:
        """``config`` knowing this identity."""
        return replace(
            config,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_region=self.aws_region,
            vertex_project=self.vertex_project,
            vertex_region=self.vertex_region,
            vertex_client_email=self.vertex_client_email,
            vertex_public_key_pem=self.vertex_public_key_pem,
        )

    def service_account_json(self, token_uri: str) -> str:
        """The service-account key file google-auth reads (``type: service_account``)."""
        if self.vertex_private_key_pem is None:
            raise ValueError("this identity has no Google key (generate it with vertex_key)")
        return json.dumps(
            {
                "type": "service_account",
                "project_id": self.vertex_project,
                "private_key_id": "simulated-key-1",
                "private_key": self.vertex_private_key_pem,
                "client_email": self.vertex_client_email,
                "client_id": "100000000000000000001",
                "token_uri": token_uri,
            },
            indent=2,
        )


def rsa_key_pair() -> tuple[str, str]:
    """A throwaway 2048-bit RSA key pair: (private PKCS#8 PEM, public PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

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


@final
@dataclass(frozen=True, slots=True)
class SimulatedUpstream:
    """One simulator of a fleet: its upstream name, its kind, and where it listens."""

    name: str
    kind: str
    root: str
    """``http://host:port``: where ``/_sim/...`` lives."""

    @property
    def base_url(self) -> str:
        """What the kind's SDK client takes as ``base_url``: the root, ``/v1`` for Vertex."""
        return f"{self.root}/v1" if self.kind == "vertex" else self.root

    @property
    def overload_url(self) -> str:
        return f"{self.root}/_sim/overload"


@final
@dataclass(frozen=True, slots=True)
class SimulatedFleet:
    """Running simulators (``run_simulated_upstreams``) and what a gateway needs to use them."""

    upstreams: tuple[SimulatedUpstream, ...]
    identity: CloudIdentity

    @property
    def token_uri(self) -> str | None:
        """The Google token endpoint of the fleet: its first Vertex simulator's."""
        for upstream in self.upstreams:
            if upstream.kind == "vertex":
                return f"{upstream.root}/token"
        return None

    def upstreams_toml(self) -> str:
        """The ``[[upstream]]`` tables describing the fleet (``UPSTREAMS_FILE``'s format)."""
        identity = self.identity
        lines = [
            "# Simulated upstreams (trio-batcher simulate); their ports change every run.",
            "# Credentials: the variables of the fleet's environment (no secret is in here).",
        ]
        for upstream in self.upstreams:
            lines += [
                "",
                "[[upstream]]",
                f"name = {_quoted(upstream.name)}",
                f"kind = {_quoted(upstream.kind)}",
                f"base_url = {_quoted(upstream.base_url)}",
                "weight = 1",
                "priority = 0",
            ]
            if upstream.kind == "anthropic":
                lines.append(f"api_key_env = {_quoted(SIM_KEY_ENV)}")
                continue
            if upstream.kind == "bedrock":
                lines.append(f"region = {_quoted(identity.aws_region)}")
                to_id = bedrock_model_id
            else:
                lines.append(f"project = {_quoted(identity.vertex_project)}")
                lines.append(f"region = {_quoted(identity.vertex_region)}")
                to_id = vertex_model_id
            lines += ["", "[upstream.models]"]
            lines += [
                f"{_quoted(name)} = {_quoted(to_id(model))}" for name, model in served_models()
            ]
        return "\n".join(lines) + "\n"

    def environment(self, directory: Path) -> dict[str, str]:
        """The variables that let a gateway's credential chains find the fleet's identity.

        Writes the service-account JSON into ``directory`` (mode 0600) when the fleet has a
        Vertex upstream; ``directory`` should be private (``tempfile.mkdtemp``'s 0700).
        The values include secrets: set them, never print them.
        """
        kinds = {upstream.kind for upstream in self.upstreams}
        env: dict[str, str] = {}
        if "anthropic" in kinds:
            env[SIM_KEY_ENV] = SIM_API_KEY
        if "bedrock" in kinds:
            env["AWS_ACCESS_KEY_ID"] = self.identity.aws_access_key_id
            env["AWS_SECRET_ACCESS_KEY"] = self.identity.aws_secret_access_key
            env["AWS_REGION"] = self.identity.aws_region
        token_uri = self.token_uri
        if token_uri is not None:
            path = directory / SERVICE_ACCOUNT_FILE
            write_private(path, self.identity.service_account_json(token_uri))
            env["GOOGLE_APPLICATION_CREDENTIALS"] = str(path.resolve())
        return env


def prepare_environment(fleet: SimulatedFleet, directory: Path) -> dict[str, str]:
    """``fleet.environment(directory)`` plus ``UPSTREAMS_FILE``, naming the fleet's
    upstreams file written into ``directory``: everything a gateway's process (and its
    workers) needs to route across the fleet."""
    env = fleet.environment(directory)
    path = directory / UPSTREAMS_FILE
    write_private(path, fleet.upstreams_toml())
    env["UPSTREAMS_FILE"] = str(path.resolve())
    return env


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (0600 from the start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)  # an existing file keeps its mode through O_TRUNC
        file.write(text)


def _quoted(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for these ASCII values)."""
    return json.dumps(text)


async def run_simulated_upstreams(
    kinds: Sequence[str],
    config: SimulatorConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown: trio.Event | None = None,
    identity: CloudIdentity | None = None,
    graceful_timeout: float = 5.0,
    task_status: trio.TaskStatus[SimulatedFleet] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one simulator per entry of ``kinds`` until ``shutdown`` is set; reports the
    ``SimulatedFleet`` once every one is bound.

    Each simulator has its own state (counters, limits, overload) and port: ``port``,
    ``port + 1``, ... or, with ``port`` 0, each an ephemeral one. Names are
    ``sim-<kind>-<n>``, counted per kind. ``config`` applies to every one, with the fleet's
    ``identity`` (``CloudIdentity.generate`` when ``None``).

    Raises:
      ValueError: an unknown kind, or no kind.
      ModuleNotFoundError: a Vertex upstream without ``cryptography`` to make its key.
    """
    parse_kinds(",".join(kinds))
    if identity is None:
        identity = CloudIdentity.generate(
            vertex_key="vertex" in kinds,
            aws_region=config.aws_region,
            vertex_project=config.vertex_project,
            vertex_region=config.vertex_region or DEFAULT_VERTEX_REGION,
        )
    config = identity.configure(config)
    tokens = GoogleTokens(
        config.vertex_client_email, config.vertex_public_key_pem, config.vertex_token_lifetime_s
    )
    counts: dict[str, int] = {}
    upstreams: list[SimulatedUpstream] = []
    async with trio.open_nursery() as nursery:
        for position, kind in enumerate(kinds):
            counts[kind] = counts.get(kind, 0) + 1
            bound_host, bound_port = await nursery.start(
                partial(
                    run_simulator,
                    config,
                    host,
                    port + position if port else 0,
                    shutdown=shutdown,
                    graceful_timeout=graceful_timeout,
                    google_tokens=tokens,
                )
            )
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            root = f"http://{shown}:{bound_port}"
            upstreams.append(SimulatedUpstream(f"sim-{kind}-{counts[kind]}", kind, root))
        task_status.started(SimulatedFleet(tuple(upstreams), identity))
