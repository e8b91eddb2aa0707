"""``python -m sparsewire`` runs the command-line tool."""

from sparsewire.cli import main

raise SystemExit(main())
