"""``python -m roam_core`` runs the CLI."""

import sys

from roam_core.cli import main

sys.exit(main())
