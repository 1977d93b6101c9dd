"""Atomic file writes: a reader never sees half a file, a failed write leaves nothing behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UserError


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file and one rename: a reader never sees half a file."""
    target = Path(path)
    folder = target.parent.resolve()
    if not folder.is_dir():
        raise UserError(f"{target}: cannot write: folder {folder} does not exist")
    if isinstance(data, str):
        from .redact import output_redacted, redact_text

        raw = (redact_text(data) if output_redacted() else data).encode()  # the output boundary
    else:
        raw = data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise UserError(f"{target}: cannot write ({err.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"{target}: cannot write ({err.strerror or err})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
