"""``python -m guided``: the command-line interface."""

from guided.cli import main

raise SystemExit(main())
