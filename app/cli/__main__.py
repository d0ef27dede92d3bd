"""``python -m app.cli``: the ``clarion`` command (how the supervisor starts its children)."""

from app.cli.main import main

main()
