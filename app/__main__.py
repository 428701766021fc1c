"""``python -m app``: the same as ``roam serve`` (see ``roam serve --help``)."""

import sys

from roam_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
