"""``trio-batcher``: serve the proxy, run the simulated upstream, benchmark both, or manage
tenants' keys (``keys``).

Serving loads the gateway and nothing else: the simulator (``trio_batcher.simulator``, the
testing package) is imported only by ``serve --simulate`` and ``simulate``, and the benchmark
lab (``trio_batcher_bench``, a separate distribution in the repository's ``bench/``) only by
``bench``; ``tests/test_packaging.py`` checks both.

Configuration errors end the process with exit code 2 and one line on stderr naming the
variable or flag and the problem -- never a traceback -- so a typo in a deployment's
environment is readable in any log viewer.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

import trio

from .app import create_app
from .logs import configure_logging
from .runtime import check_files
from .serving import (
    Supervisor,
    drain_when_supervisor_leaves,
    raise_open_file_limit,
    serve_app,
    serve_plan,
    tune_gc_for_serving,
    tune_malloc_for_serving,
)
from .settings import SPECS, Settings, SettingsError
from .store.deployment import is_simulated, simulated_id
from .tenants import load_tenants
from .tenants.keys_cli import add_keys_parser, run_keys

if TYPE_CHECKING:
    from .simulator import SimulatorConfig
    from .simulator.fleet import SimulatedFleet

_PROG: Final = "trio-batcher"
_SIM_KEY: Final = "sk-ant-simulated-local"  # the embedded simulator accepts any key
# hypercorn's graceful timeout, which starts after the app's own drain (SHUTDOWN_GRACE_S).
_CLOSE_TIMEOUT_S: Final = 5.0
# After the drain and hypercorn's close, how long before a stuck process exits anyway.
_EXIT_MARGIN_S: Final = 5.0
# The benchmark lab: its own distribution (bench/pyproject.toml), never in the gateway's wheel.
_LAB: Final = "trio_batcher_bench"
_LAB_MISSING: Final = (
    "the benchmark lab is not installed. It is a separate distribution in the repository's "
    "bench/ directory; from a checkout, install it next to the gateway with "
    "`pip install -e . -e ./bench` (docs/benchmarks.md)."
)


def _fail(message: str) -> NoReturn:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _keys_required(settings: Settings) -> bool:
    """Whether clients need a key: PROXY_API_KEYS, or a tenants file that lists keys."""
    if settings.proxy_api_keys:
        return True
    return load_tenants(settings.tenants_file).auth_required


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (each overrides the environment variable it names)")
    for spec in SPECS:
        if spec.secret:
            continue  # secrets come from the environment only: flags leak into `ps` output
        group.add_argument(
            spec.flag, dest=f"setting_{spec.env}", metavar="VALUE", help=f"{spec.env}: {spec.doc}"
        )


_SIM_FLAGS: Final = (
    ("ttft_ms", float, "time to first token (ms)"),
    ("tokens_per_s", float, "output token rate after the first token (0 = instant)"),
    ("jitter", float, "relative latency jitter, e.g. 0.1"),
    ("error_rate", float, "fraction of requests answered with 500"),
    ("rate_429", float, "fraction of requests answered with 429"),
    ("rate_529", float, "fraction of requests answered with 529"),
    ("seed", int, "seed for jitter and injected faults"),
    ("rpm_limit", int, "enforced requests per minute (token bucket; 429 with retry-after)"),
    ("tpm_limit", int, "enforced input+output tokens per minute (token bucket; 429)"),
    ("ratelimit_period_s", float, "refill period of the rate limits, in seconds (default 60)"),
    ("overload_every_s", float, "start a 529 overload window this often (0: only one)"),
    ("overload_for_s", float, "length of each 529 overload window, in seconds (0: never)"),
    ("batch_processing_s", float, "delay before a Message Batch starts processing (seconds)"),
    ("batch_request_s", float, "time each request of a Message Batch takes (seconds)"),
    ("batch_expiry_s", float, "a Message Batch still processing after this long expires"),
    ("batch_entries", int, "Message Batches kept in memory (default 100)"),
)


def _add_simulator_flags(parser: argparse.ArgumentParser, prefix: str) -> None:
    group = parser.add_argument_group("simulated upstream")
    for name, kind, help_text in _SIM_FLAGS:
        flag = "--" + (prefix + name).replace("_", "-")
        group.add_argument(flag, dest=prefix + name, type=kind, default=None, help=help_text)


def _simulator_config(args: argparse.Namespace, prefix: str, **defaults: float) -> SimulatorConfig:
    from .simulator import SimulatorConfig  # only --simulate and simulate load the simulator

    values: dict[str, Any] = dict(defaults)
    for name, _, _ in _SIM_FLAGS:
        value = getattr(args, prefix + name)
        if value is not None:
            if value < 0:
                _fail(f"--{(prefix + name).replace('_', '-')} must be >= 0")
            values[name] = value
    try:
        return SimulatorConfig(**values)
    except ValueError as exc:
        _fail(str(exc))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=(
            "An OpenAI-compatible gateway in front of Anthropic's Messages API, built on trio."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    secrets = "\n".join(f"  {spec.env}: {spec.doc}" for spec in SPECS if spec.secret)
    serve = sub.add_parser(
        "serve",
        help="run the proxy",
        description=(
            "Run the proxy under hypercorn's trio worker. With --simulate, a simulated Anthropic "
            "upstream runs in the same process, so no API key or network is needed."
        ),
        epilog=(
            "secrets, read from the environment only (a flag would show in `ps`):\n"
            f"{secrets}\n\nEvery setting: docs/configuration.md."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    serve.add_argument(
        "--simulate",
        action="store_true",
        help="start the simulated upstream in-process and use it (no key needed)",
    )
    serve.add_argument(
        "--sim-upstreams",
        metavar="KINDS",
        default=None,
        help=(
            "with --simulate: several simulated upstreams, one per kind listed "
            "(anthropic,bedrock,vertex; repeats allowed), routed across through a generated "
            "UPSTREAMS_FILE; each can be overloaded alone (POST <its URL>/_sim/overload)"
        ),
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="allow a non-loopback --host without PROXY_API_KEYS",
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=(
            "worker processes sharing the port, supervised and restarted (default 1); each "
            "gets BATCH_MAX_CONCURRENCY // N, see docs/configuration.md"
        ),
    )
    # A worker of `serve --workers`: serve on the supervisor's socket, drain when stdin closes.
    serve.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    _add_setting_flags(serve)
    _add_simulator_flags(serve, "sim_")

    simulate = sub.add_parser("simulate", help="run the simulated Anthropic upstream alone")
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument(
        "--port",
        type=int,
        default=8001,
        help="port (default 8001); with --upstreams, the first of consecutive ports (0: any)",
    )
    simulate.add_argument(
        "--upstreams",
        metavar="KINDS",
        default=None,
        help=(
            "run several simulated upstreams, one per kind listed (anthropic,bedrock,vertex; "
            "repeats allowed), each with its own state and port"
        ),
    )
    simulate.add_argument(
        "--write-upstreams-file",
        metavar="PATH",
        default=None,
        help=(
            "with --upstreams: write the UPSTREAMS_FILE describing them to PATH, and the "
            "credentials a gateway needs to PATH.env (mode 0600; `set -a; . PATH.env; set +a`)"
        ),
    )
    simulate.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    _add_simulator_flags(simulate, "")

    # Listed for --help only: main() hands `bench ...` to the lab before this parser runs, so
    # the lab's flags are its own and the lab is imported only when asked for.
    sub.add_parser(
        "bench",
        help="benchmark the proxy against the simulator (the lab: pip install -e ./bench)",
        add_help=False,
    )
    add_keys_parser(sub)
    # argparse derives dest names with underscores; keep the prefix scheme uniform.
    return parser


def _flag_settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings given as flags, by environment name, as the strings they were given."""
    return {
        spec.env: value
        for spec in SPECS
        if (value := getattr(args, f"setting_{spec.env}", None)) is not None
    }


def _settings_from(args: argparse.Namespace) -> Settings:
    overrides = _flag_settings(args)
    try:
        settings = Settings.from_env(overrides=overrides)
        check_files(settings)  # a bad pricing or tenants file stops here, in one line
        return settings
    except SettingsError as exc:
        flag = next(s.flag for s in SPECS if s.env == exc.name)
        where = f"{exc.name} (or {flag})" if exc.name in overrides else exc.name
        _fail(f"{where}: {exc.problem}")


def _configure_logging(
    level: str, args: argparse.Namespace | None = None, *, with_pid: bool = False
) -> None:
    configure_logging(level, _log_format(args), with_pid=with_pid)


def _log_format(args: argparse.Namespace | None) -> str:
    """``LOG_FORMAT`` (or ``--log-format``), read before the other settings: logging is
    configured first. A bad value logs as text here and stops ``serve`` with the settings'
    own message."""
    flag = getattr(args, "setting_LOG_FORMAT", None) if args is not None else None
    raw = flag or os.environ.get("LOG_FORMAT") or "text"
    spec = next(s for s in SPECS if s.env == "LOG_FORMAT")
    try:
        return str(spec.parse(raw))
    except ValueError:
        return "text"


async def _stop_on_signals(stop: trio.Event, *, task_status: trio.TaskStatus[None]) -> None:
    """First SIGINT/SIGTERM: graceful stop. A second one: stop now.

    "Now" is ``os._exit``: a cancellation could wait forever on a write hypercorn shields
    (to a client that stopped reading), and whoever sends a second signal wants the process
    gone.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if stop.is_set():
                _exit_now(f"{signal.Signals(signum).name} received again, stopping now", 130)
            print(
                f"{_PROG}: {signal.Signals(signum).name} received, shutting down gracefully "
                "(send again to stop at once)",
                file=sys.stderr,
            )
            stop.set()


def _exit_now(message: str, code: int) -> NoReturn:
    print(f"{_PROG}: {message}", file=sys.stderr, flush=True)
    os._exit(code)


async def _exit_if_stuck(stop: trio.Event, budget_s: float) -> None:
    """Once stopping, exit anyway after ``budget_s``: every request has been answered or
    failed by then, and only connections hypercorn cannot close (a client that stopped
    reading, mid-write) would keep the process alive."""
    await stop.wait()
    await trio.sleep(budget_s)
    _exit_now("connections still open after the shutdown grace period; exiting anyway", 0)


async def _start_simulator(
    args: argparse.Namespace, nursery: trio.Nursery, stop: trio.Event
) -> str:
    """Start ``--simulate``'s upstream in ``nursery`` until ``stop``; its base URL."""
    from .simulator import run_simulator

    config = _simulator_config(args, "sim_", ttft_ms=150.0, tokens_per_s=120.0, jitter=0.1)
    host, port = await nursery.start(partial(run_simulator, config, "127.0.0.1", 0, shutdown=stop))
    return f"http://{host}:{port}"


def _sim_kinds(args: argparse.Namespace, flag: str) -> tuple[str, ...] | None:
    """The kinds ``--upstreams`` / ``--sim-upstreams`` lists, checked and installed; or None."""
    text: str | None = getattr(args, flag.lstrip("-").replace("-", "_"))
    if text is None:
        return None
    from .simulator.fleet import parse_kinds, require_kinds
    from .upstream.kinds.extras import MissingExtraError

    try:
        kinds = parse_kinds(text)
        require_kinds(kinds)
    except (ValueError, MissingExtraError) as exc:
        _fail(f"{flag}: {exc}")
    return kinds


async def _start_fleet(
    args: argparse.Namespace,
    nursery: trio.Nursery,
    stop: trio.Event,
    directory: Path,
) -> tuple[SimulatedFleet, dict[str, str]]:
    """Start ``--sim-upstreams``'s simulators in ``nursery`` until ``stop``; the fleet and
    the environment that routes a gateway across it (an upstreams file and credentials,
    written into the private ``directory``)."""
    from .simulator.fleet import prepare_environment, run_simulated_upstreams
    from .simulator.fleet_cli import upstream_lines

    kinds = _sim_kinds(args, "--sim-upstreams")
    assert kinds is not None
    config = _simulator_config(args, "sim_", ttft_ms=150.0, tokens_per_s=120.0, jitter=0.1)
    fleet: SimulatedFleet = await nursery.start(
        partial(run_simulated_upstreams, kinds, config, "127.0.0.1", 0, shutdown=stop)
    )
    env = prepare_environment(fleet, directory)
    for line in upstream_lines(fleet):
        print(f"{_PROG}: simulated upstream {line}", file=sys.stderr, flush=True)
    return fleet, env


def _fleet_settings(settings: Settings, fleet: SimulatedFleet, env: dict[str, str]) -> Settings:
    """``settings`` routed across ``fleet`` through ``env``'s ``UPSTREAMS_FILE``, checked as
    any upstreams file is (``check_files``). ``ANTHROPIC_BASE_URL`` is the first simulator,
    which answers Anthropic's API whatever its kind, for what is not routed."""
    from .simulator.fleet_cli import adopt_environment

    adopt_environment(env)
    settings = settings.replace(
        anthropic_base_url=fleet.upstreams[0].root,
        anthropic_api_key=_SIM_KEY,
        deployment_id=simulated_id(settings.deployment_id),
        upstreams_file=env["UPSTREAMS_FILE"],
    )
    try:
        check_files(settings)
    except SettingsError as exc:
        _fail(f"--sim-upstreams: {exc.name}: {exc.problem}")
    return settings


def _fleet_summary(fleet: SimulatedFleet) -> str:
    names = ", ".join(upstream.name for upstream in fleet.upstreams)
    return f"{len(fleet.upstreams)} simulated upstreams ({names})"


async def _serve(args: argparse.Namespace, settings: Settings) -> None:
    raise_open_file_limit()
    stop = trio.Event()
    worker_fd: int | None = args.worker_fd
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signals, stop)
        if worker_fd is not None:
            await nursery.start(drain_when_supervisor_leaves, stop)
        budget = settings.shutdown_grace_s + _CLOSE_TIMEOUT_S + _EXIT_MARGIN_S
        nursery.start_soon(_exit_if_stuck, stop, budget)
        upstream = settings.anthropic_base_url
        sim_stop = trio.Event()
        if args.simulate and args.sim_upstreams is not None:
            directory = Path(tempfile.mkdtemp(prefix="trio-batcher-sim-"))
            nursery.start_soon(_remove_when_set, sim_stop, directory)
            fleet, env = await _start_fleet(args, nursery, sim_stop, directory)
            settings = _fleet_settings(settings, fleet, env)
            upstream = _fleet_summary(fleet)
        elif args.simulate:
            upstream = await _start_simulator(args, nursery, sim_stop)
            settings = settings.replace(
                anthropic_base_url=upstream,
                anthropic_api_key=_SIM_KEY,
                deployment_id=simulated_id(settings.deployment_id),
            )
            upstream += " (simulated)"
        app = create_app(settings)
        async with trio.open_nursery() as server:
            host, port = await server.start(
                partial(
                    serve_app,
                    app,
                    args.host,
                    args.port,
                    shutdown=stop,
                    graceful_timeout=_CLOSE_TIMEOUT_S,
                    keep_alive_timeout=settings.keepalive_timeout_s,
                    access_log=args.access_log,
                    fd=worker_fd,
                )
            )
            tune_gc_for_serving()
            tune_malloc_for_serving()
            who = "serving" if worker_fd is None else f"worker {os.getpid()} serving"
            print(
                f"{_PROG}: {who} OpenAI-compatible API on {_url(host, port)}/v1 -> {upstream}",
                file=sys.stderr,
                flush=True,
            )
        # The server has drained and run its lifespan shutdown: stop the simulator and signals.
        sim_stop.set()
        nursery.cancel_scope.cancel()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _supervise(args: argparse.Namespace, settings: Settings) -> int:
    """``serve --workers N`` (N > 1): the supervisor process (``workers``); its exit code."""
    overrides = _flag_settings(args)
    async with trio.open_nursery() as nursery:
        upstream = settings.anthropic_base_url
        sim_stop = trio.Event()
        if args.simulate and args.sim_upstreams is not None:
            # One fleet for every worker, in this process; workers inherit its environment.
            directory = Path(tempfile.mkdtemp(prefix="trio-batcher-sim-"))
            nursery.start_soon(_remove_when_set, sim_stop, directory)
            fleet, env = await _start_fleet(args, nursery, sim_stop, directory)
            fleet_settings = _fleet_settings(settings, fleet, env)
            overrides.update(
                env,
                ANTHROPIC_BASE_URL=fleet_settings.anthropic_base_url,
                ANTHROPIC_API_KEY=_SIM_KEY,
                DEPLOYMENT_ID=simulated_id(settings.deployment_id),
            )
            upstream = _fleet_summary(fleet)
        elif args.simulate:
            # One simulator for every worker, in this process: it outlives their drain.
            upstream = await _start_simulator(args, nursery, sim_stop)
            overrides.update(
                ANTHROPIC_BASE_URL=upstream,
                ANTHROPIC_API_KEY=_SIM_KEY,
                DEPLOYMENT_ID=simulated_id(settings.deployment_id),
            )
            upstream += " (simulated)"
        plan = serve_plan(
            args.workers,
            cap=settings.batch_max_concurrency,
            overrides=overrides,
            stop_budget_s=settings.shutdown_grace_s + _CLOSE_TIMEOUT_S + _EXIT_MARGIN_S,
            log_level=args.log_level,
            access_log=args.access_log,
            shared_cap=settings.redis_url is not None and settings.batch_enabled,
        )
        supervisor = Supervisor(plan)
        async with trio.open_nursery() as workers:
            host, port = await workers.start(supervisor.run, args.host, args.port)
            print(
                f"{_PROG}: serving OpenAI-compatible API on {_url(host, port)}/v1 -> {upstream} "
                f"with {plan.count} workers (BATCH_MAX_CONCURRENCY {plan.share} each)",
                file=sys.stderr,
                flush=True,
            )
        sim_stop.set()
    if not supervisor.clean:
        print(f"{_PROG}: a worker did not drain cleanly (see above)", file=sys.stderr)
        return 1
    return 0


async def _remove_when_set(event: trio.Event, directory: Path) -> None:
    """Remove ``directory`` (the fleet's credentials) once ``event`` is set or on the way
    out, however the process ends short of being killed."""
    try:
        await event.wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _simulate_fleet(args: argparse.Namespace, kinds: tuple[str, ...]) -> None:
    """``simulate --upstreams``: the fleet, its lines, and the files for a gateway."""
    from .simulator.fleet import run_simulated_upstreams
    from .simulator.fleet_cli import upstream_lines, write_operator_files

    stop = trio.Event()
    config = _simulator_config(args, "")
    directory = Path(tempfile.mkdtemp(prefix="trio-batcher-sim-"))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(_stop_on_signals, stop)
            async with trio.open_nursery() as servers:
                fleet: SimulatedFleet = await servers.start(
                    partial(
                        run_simulated_upstreams, kinds, config, args.host, args.port, shutdown=stop
                    )
                )
                for line in upstream_lines(fleet):
                    print(f"{_PROG}: simulated upstream {line}", file=sys.stderr, flush=True)
                if args.write_upstreams_file is not None:
                    path = Path(args.write_upstreams_file)
                    env_path, names = write_operator_files(fleet, path, directory)
                    print(
                        f"{_PROG}: wrote the upstreams file {path} and the credentials a "
                        f"gateway needs ({', '.join(names)}; values not shown) to {env_path}: "
                        f"set -a; . {env_path}; set +a",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    print(
                        f"{_PROG}: --write-upstreams-file PATH writes the UPSTREAMS_FILE for "
                        "these and the credentials a gateway needs",
                        file=sys.stderr,
                        flush=True,
                    )
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _simulate(args: argparse.Namespace) -> None:
    from .simulator import run_simulator

    kinds = _sim_kinds(args, "--upstreams")
    if kinds is not None:
        if args.port and not 0 < args.port <= 65536 - len(kinds):
            _fail(f"--port {args.port} leaves no room for {len(kinds)} consecutive ports")
        await _simulate_fleet(args, kinds)
        return
    if args.write_upstreams_file is not None:
        _fail("--write-upstreams-file needs --upstreams")
    stop = trio.Event()
    config = _simulator_config(args, "")
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on_signals, stop)
        async with trio.open_nursery() as server:
            host, port = await server.start(
                partial(run_simulator, config, args.host, args.port, shutdown=stop)
            )
            print(
                f"{_PROG}: simulated Anthropic Messages API on http://{host}:{port}/v1/messages",
                file=sys.stderr,
                flush=True,
            )
        nursery.cancel_scope.cancel()


def _bench(argv: Sequence[str]) -> int:
    """``trio-batcher bench``: the lab parses its own flags and runs; its exit status.

    Imported here, by name, and only here: the gateway neither ships nor depends on it.
    """
    try:
        lab: Any = importlib.import_module(_LAB)
    except ModuleNotFoundError as exc:
        if exc.name != _LAB:
            raise  # the lab is there but something it needs is not: show what
        _fail(_LAB_MISSING)
    args = lab.build_parser(prog=f"{_PROG} bench").parse_args(argv)
    _configure_logging(args.log_level)
    status: int = lab.run_bench(args)
    return status


def _run(argv: Sequence[str]) -> None:
    """Every command but ``bench``: parse, then serve, simulate or manage keys."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and hasattr(signal, "SIGHUP"):
        # SIGHUP asks for a reload of the tenants file (TenantsWatcher catches it while the
        # app runs; a supervisor forwards it to its workers). Before the app is ready, without
        # a TENANTS_FILE and after the watcher stops, its default action would end the
        # process: ignored here instead, and the watcher's receiver restores this on exit.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    serving_workers = args.command == "serve" and (args.workers != 1 or args.worker_fd is not None)
    _configure_logging(args.log_level, args, with_pid=serving_workers)
    if args.command == "serve" and args.worker_fd is not None:
        # The supervisor has checked the command line; the settings come from its env.
        trio.run(_serve, args, _settings_from(args))
    elif args.command == "serve":
        if args.sim_upstreams is not None:
            if not args.simulate:
                _fail("--sim-upstreams needs --simulate")
            if "UPSTREAMS_FILE" in _flag_settings(args) or os.environ.get("UPSTREAMS_FILE"):
                _fail("--sim-upstreams writes its own UPSTREAMS_FILE; unset UPSTREAMS_FILE")
            _sim_kinds(args, "--sim-upstreams")
        settings = _settings_from(args)
        # With UPSTREAMS_FILE each anthropic upstream names its own key variable, which
        # check_files checks; ANTHROPIC_API_KEY is then not needed.
        if not args.simulate and not settings.anthropic_api_key and not settings.upstreams_file:
            _fail(
                "ANTHROPIC_API_KEY is not set. To try trio-batcher without a key, run "
                "`trio-batcher serve --simulate` (a built-in simulated upstream)."
            )
        if not args.simulate and is_simulated(settings.deployment_id):
            _fail(
                f"DEPLOYMENT_ID {settings.deployment_id!r} is reserved for `serve "
                "--simulate`, whose state never mixes with a real upstream's; choose "
                "another name."
            )
        if (
            not _is_loopback(args.host)
            and not _keys_required(settings)
            and not args.allow_unauthenticated
        ):
            _fail(
                f"refusing to bind non-loopback --host {args.host} without client keys; set "
                "PROXY_API_KEYS or give tenants keys in TENANTS_FILE, or pass "
                "--allow-unauthenticated."
            )
        if not 0 <= args.port <= 65535:
            _fail(f"--port must be between 0 and 65535, got {args.port}")
        if args.workers < 1:
            _fail(f"--workers must be at least 1, got {args.workers}")
        if args.workers > 1 and os.name != "posix":
            _fail("--workers needs a POSIX system (the socket is passed to each worker)")
        if args.workers == 1:
            trio.run(_serve, args, settings)
        else:
            raise SystemExit(trio.run(_supervise, args, settings))
    elif args.command == "simulate":
        trio.run(_simulate, args)
    elif args.command == "keys":
        raise SystemExit(run_keys(args))


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["bench"]:
            raise SystemExit(_bench(argv[1:]))
        _run(argv)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except (OSError, BaseExceptionGroup) as exc:
        exit_code = _exit_code_inside(exc)
        if exit_code is not None:
            raise SystemExit(exit_code) from None
        os_error = _find_os_error(exc)
        if os_error is None:
            raise
        print(f"{_PROG}: error: {os_error.strerror or os_error}", file=sys.stderr)
        raise SystemExit(1) from None


def _exit_code_inside(exc: BaseException) -> int | str | None:
    """The exit code of a ``SystemExit`` (a bad setting found inside trio) or a
    ``KeyboardInterrupt`` (130) that trio wrapped in an exception group, if that is what
    this is."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            code = _exit_code_inside(inner)
            if code is not None:
                return code
        return None
    if isinstance(exc, SystemExit):
        return exc.code if exc.code is not None else 0
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return None


def _find_os_error(exc: BaseException) -> OSError | None:
    """The OSError (e.g. address in use) inside what trio raised, if that is all it was."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(OSError)
        if matched is not None and rest is None:
            first = matched.exceptions[0]
            return _find_os_error(first)
    return None
