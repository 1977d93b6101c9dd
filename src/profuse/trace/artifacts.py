"""Files a bundle keeps beside its trace (``meta.json``, ``artifacts/inductor/*.py``), read safely.

A trace folder is input from anyone: its side files may be links to files elsewhere, FIFOs that
block a reader forever, or huge files. Only regular files inside the folder itself are read, each
opened without following links and without blocking, and cut at a size before it is read whole.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

INDUCTOR = ("artifacts", "inductor")
MAX_FILES = 20
MAX_BYTES = 200_000
SIDE_FILE_MAX_BYTES = 8 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def read_artifacts(trace_path: str | os.PathLike[str], *, subdir: tuple[str, ...] = INDUCTOR,
                   suffix: str = ".py", max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> dict[str, str]:
    """``{file name: text}`` of up to ``max_files`` regular files under ``subdir`` of the trace's folder.

    Each text is at most ``max_bytes`` long (decoded with replacement). Links, FIFOs, devices and
    folders are skipped; a folder on the way that is a link ends the search.
    """
    if os.open not in os.supports_dir_fd or not _NOFOLLOW:
        return {}  # no safe way to open relative to a folder without following links here
    try:
        fd = os.open(Path(trace_path).parent, os.O_RDONLY | _DIRECTORY)
    except OSError:
        return {}
    try:
        for part in subdir:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError:
                return {}
            os.close(fd)
            fd = nxt
        names = sorted(e.name for e in os.scandir(fd) if e.name.endswith(suffix)
                       and e.is_file(follow_symlinks=False))[:max_files]
        out = {}
        for name in names:
            text = _read_regular(name, fd, max_bytes)
            if text is not None:
                out[name] = text
        return out
    finally:
        os.close(fd)


def _read_regular(name: str, dir_fd: int, max_bytes: int) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], max_bytes
        while left > 0:
            block = os.read(fd, min(left, 1 << 16))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_side_bytes(path: str | os.PathLike[str], max_bytes: int = SIDE_FILE_MAX_BYTES, *,
                    follow_links: bool = False) -> tuple[bytes | None, str]:
    """``(bytes, "")`` of a regular file of at most ``max_bytes``, else ``(None, why not)``.

    The file is opened without blocking (and, for a side file found beside a trace, without following
    a link; a path the user typed may be one: ``follow_links``), then checked on the open descriptor,
    so a FIFO, a device or a link put in its place is refused, never read; at most ``max_bytes + 1``
    bytes are read, so a file that grows meanwhile cannot exhaust memory either.
    """
    nofollow = 0 if follow_links else _NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | nofollow | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, "no such file" if follow_links else "no such file (a broken link?)"
    except OSError as err:
        if not follow_links and os.path.islink(path):
            return None, "is a symbolic link: not followed"
        return None, f"cannot be opened ({err.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # checked before fdopen, which refuses a folder with a traceback
            return None, f"is not a regular file (a {file_kind(st.st_mode)})"
        if st.st_size > max_bytes:
            return None, f"is {st.st_size:,} bytes, over the {max_bytes:,} read here"
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(st.st_size + 1)  # the size it has, not the limit: no buffer of max_bytes up front
    except OSError as err:
        return None, f"cannot be read ({err.strerror})"
    finally:
        os.close(fd)
    if len(data) > st.st_size:
        return None, "grew while read"
    return data, ""


def side_files(folder: str | os.PathLike[str], suffix: str) -> list[tuple[Path, str]]:
    """``(path, "")`` for each regular file in ``folder`` whose name ends with ``suffix``, and
    ``(path, why not)`` for each other entry so named (a link, a FIFO, a device, a folder), sorted
    by name. Entries are looked at with ``lstat``: links are reported, never followed."""
    out: list[tuple[Path, str]] = []
    try:
        entries = sorted((e for e in os.scandir(folder) if e.name.endswith(suffix)), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        try:
            mode = e.stat(follow_symlinks=False).st_mode
        except OSError as err:
            out.append((Path(e.path), f"cannot be examined ({err.strerror})"))
            continue
        if stat.S_ISREG(mode):
            out.append((Path(e.path), ""))
        elif stat.S_ISLNK(mode):
            out.append((Path(e.path), "is a symbolic link: not followed"))
        else:
            out.append((Path(e.path), f"is not a regular file (a {file_kind(mode)})"))
    return out


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = ((stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((label for test, label in kinds if test(mode)), "special file")

