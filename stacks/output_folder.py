"""Output folders a command writes into, checked before any work starts: a path that is a file, or a
folder that cannot be created or written, is one line naming the flag, the path and why, instead of
a traceback after the work is done."""

from __future__ import annotations

import os
from pathlib import Path


class OutputFolderError(Exception):
    """An output folder option points somewhere no file can be written."""


def prepare(path: Path, flag: str) -> Path:
    """Create `path` (and its parents) if missing and check that files can be written into it."""
    if path.exists() and not path.is_dir():
        raise OutputFolderError(f"{flag} {path}: is a file, not a folder; give a folder (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputFolderError(f"{flag} {path}: cannot create the folder: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputFolderError(f"{flag} {path}: the folder is not writable by this user")
    return path
