"""``python -m slime_core`` is the ``core`` command."""

from slime_core.cli.main import main

main()
