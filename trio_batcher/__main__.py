"""``python -m trio_batcher`` is the ``trio-batcher`` command."""

from .cli import main

main()
