"""Build hook: ship the app's data folders inside the wheel.

Everything else about the package is in ``pyproject.toml``.  The top-level ``assets/`` (the
app's CSS) and ``sample_graphs/`` stay the sources; the wheel gets copies under
``app/assets`` and ``app/sample_graphs``, where the installed app looks first
(:func:`app.data_dir`).  Editable installs and source checkouts use the top-level folders.
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

#: (source folder at the repository root, destination inside the built packages)
DATA_FOLDERS = (("assets", "app/assets"), ("sample_graphs", "app/sample_graphs"))


class BuildPyWithAppData(build_py):
    """``build_py`` that also copies :data:`DATA_FOLDERS` into the build tree."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # editable: the app reads the top-level folders in place
            return
        for src, dst in DATA_FOLDERS:
            if os.path.isdir(src):
                self.copy_tree(src, os.path.join(self.build_lib, dst))


setup(cmdclass={"build_py": BuildPyWithAppData})
