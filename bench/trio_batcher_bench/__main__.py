"""``python -m trio_batcher_bench``: the bench without the rest of the CLI."""

from __future__ import annotations

import logging

from . import build_parser, run_bench


def main() -> None:
    args = build_parser().parse_args()
    logging.basicConfig(level=args.log_level.upper())
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    raise SystemExit(run_bench(args))


main()
