"""Thin setup.py for the ament_python package; metadata lives in setup.cfg."""

import os

from setuptools import setup

PACKAGE = "blockplan"
SHARE = os.path.join("share", PACKAGE)
# Folders installed under share/blockplan/, with their sub-folders.
DATA_DIRS = ("launch", "params", "rviz", "models")


def _tree(folder):
    """data_files entries for every file below `folder`, keeping the folder layout."""
    entries = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        paths = sorted(os.path.join(root, f) for f in files if not f.startswith("."))
        if paths:
            entries.append((os.path.join(SHARE, root), paths))
    return entries


data_files = [
    ("share/ament_index/resource_index/packages", [os.path.join("resource", PACKAGE)]),
    (SHARE, ["package.xml"]),
]
for folder in DATA_DIRS:
    data_files += _tree(folder)

setup(data_files=data_files)
