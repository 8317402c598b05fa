"""What the command line says and writes about a fleet of simulated upstreams (``fleet.py``).

``trio-batcher simulate --upstreams ...`` and ``serve --simulate --sim-upstreams ...`` print
one line per upstream: its name, kind, URL and the command that overloads it. No line ever
holds a secret: the credentials go to files only, mode 0600 --
``simulate --write-upstreams-file PATH`` writes the upstreams file at ``PATH`` and, at
``PATH.env``, the shell lines that give a gateway started elsewhere the fleet's credentials
(``set -a; . PATH.env; set +a``); the names of those variables are printed, never their
values.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from .fleet import UNSET_ENV, SimulatedFleet, SimulatedUpstream, write_private

__all__ = [
    "adopt_environment",
    "env_file_text",
    "overload_command",
    "upstream_lines",
    "write_operator_files",
]


def overload_command(upstream: SimulatedUpstream, for_s: int = 30) -> str:
    """The shell command that overloads ``upstream`` for ``for_s`` seconds (529)."""
    return f"curl -X POST {upstream.overload_url} -d '{{\"for_s\": {for_s}}}'"


def upstream_lines(fleet: SimulatedFleet) -> list[str]:
    """One line per upstream: name, kind, base URL, and how to overload it."""
    return [
        f"{upstream.name} ({upstream.kind}) on {upstream.base_url} -- overload it: "
        f"{overload_command(upstream)}"
        for upstream in fleet.upstreams
    ]


def env_file_text(env: Mapping[str, str]) -> str:
    """Shell lines exporting ``env`` (after unsetting what would override the simulated AWS
    identity); they hold secrets, so they only ever go to a 0600 file."""
    lines = [
        "# The simulated upstreams' credentials, for a gateway started from this shell:",
        "#   set -a; . THIS_FILE; set +a",
        "# Secrets of a simulated identity, valid only while `trio-batcher simulate` runs.",
        f"unset {' '.join(UNSET_ENV)}",
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"


def write_operator_files(
    fleet: SimulatedFleet, path: Path, directory: Path
) -> tuple[Path, list[str]]:
    """Write the upstreams file at ``path`` and its credentials at ``path.env`` (0600; the
    service-account JSON it names goes to ``directory``); the ``.env`` path and the names
    of the variables it sets (which may be shown; their values may not)."""
    env = fleet.environment(directory)
    path.write_text(fleet.upstreams_toml(), encoding="utf-8")
    env = {"UPSTREAMS_FILE": str(path.resolve()), **env}
    env_path = path.with_name(path.name + ".env")
    write_private(env_path, env_file_text(env))
    return env_path, list(env)


def adopt_environment(env: Mapping[str, str]) -> None:
    """Make ``env`` this process's (and so its children's) environment, without the
    variables that would make the AWS chain sign as someone else."""
    for name in UNSET_ENV:
        os.environ.pop(name, None)
    os.environ.update(env)
