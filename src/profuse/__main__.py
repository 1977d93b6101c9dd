"""``python -m profuse`` runs the command line."""
from .cli import main

raise SystemExit(main())
