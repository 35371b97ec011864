"""Writing output files: only regular files, in place of regular files or of nothing, and each
command's set of files complete or not at all.

Every file is first written to a temporary file in its own folder; only when all are written are
they renamed into place. A failure, SIGINT or SIGTERM before that removes the temporaries and leaves
what was there before (SIGHUP, a closed terminal, too). Anything at a target path that is not a regular
file (a device such as /dev/null, a FIFO, a socket, a folder, a link to one of these, a link to nothing)
is refused before anything is written:
replacing it by a regular file would break whatever uses it. Every refusal is an `InputError` that
names the option and says what would fix it.
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from planner.types import InputError

KIND_OF_FILE = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}
FIXES_BY_ERRNO = {
    errno.ENOSPC: "the disk is full; free some space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up; free some space or write elsewhere",
    errno.EROFS: "the file system is read-only; write elsewhere",
    errno.EACCES: "permission denied; write to a folder you may write to",
    errno.EPERM: "permission denied; write to a folder you may write to",
    errno.ENAMETOOLONG: "the file name is too long; use a shorter one",
    errno.ENOTDIR: "a part of the path is a file, not a folder; fix the path",
    errno.ELOOP: "the path has too many symbolic links (a loop?); fix the path",
    errno.EISDIR: "is a folder; give the path of a file",
}


def _problem(option: str, path: Path, e: OSError) -> InputError:
    fix = FIXES_BY_ERRNO.get(e.errno) or f"cannot write: {e.strerror or e}; write elsewhere"
    return InputError(f"{option} {path}", fix)


def _kind(mode: int) -> str:
    return KIND_OF_FILE.get(stat.S_IFMT(mode), "not a regular file")


def _dangling_link(path: Path, option: str) -> InputError:
    return InputError(f"{option} {path}", f"is a symbolic link to {os.readlink(path)}, which does not exist; hetplan "
                                          f"does not create a link's target: remove the link or give another path")


def _missing_then_up(path: Path) -> Path | None:
    """The first missing folder that `path` leaves again with `..` (e.g. `o` in o/../x), if any: such a path
    names no folder until that one exists, and creating it would write somewhere else than the path reads."""
    parts = path.parts
    for k, part in enumerate(parts[:-1]):
        prefix = Path(*parts[:k + 1])
        if parts[k + 1] == ".." and part not in ("..", ".", "/") and not os.path.lexists(prefix):
            return prefix
    return None


def _check_path_walk(path: Path, option: str) -> None:
    missing = _missing_then_up(path)
    if missing is not None:
        raise InputError(f"{option} {path}", f"goes through {missing}, which does not exist, and back out of it "
                                             f"with `..`; give the path without `..` ({os.path.normpath(path)}?)")


def check_output_file(path: str | Path, option: str) -> Path:
    """The path to write `option`'s file to: `path` itself, or where the symbolic link `path`
    points. Refuses anything there but a regular file or nothing, and a link whose target is missing
    (writing there would create folders the user never named)."""
    path = Path(path)
    _check_path_walk(path, option)       # outside the try: its InputError is a ValueError too
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        info = os.stat(target)
    except FileNotFoundError:
        if path.is_symlink():
            raise _dangling_link(path, option) from None
        return path                                            # nothing there yet: fine
    except ValueError as e:                                    # a NUL byte in the name
        raise InputError(f"{option} {path!r}", f"not a usable file name ({e}); use another name") from None
    except OSError as e:
        raise _problem(option, path, e) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{option} {path}", "is a folder; give the path of a file in it")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{option} {path}", f"is {_kind(info.st_mode)}, not a regular file; hetplan writes only "
                                             f"regular files: give the path of a new or regular file")
    return target


def check_output_folder(path: str | Path, option: str) -> Path:
    """A folder to write files into: an existing folder (or a link to one), or nothing yet."""
    path = Path(path)
    _check_path_walk(path, option)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise _dangling_link(path, option) from None
        return path
    except ValueError as e:
        raise InputError(f"{option} {path!r}", f"not a usable folder name ({e}); use another name") from None
    except OSError as e:
        raise _problem(option, path, e) from None
    if not stat.S_ISDIR(info.st_mode):
        what = "a regular file" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        raise InputError(f"{option} {path}", f"is {what}, not a folder; give the path of a folder (new or existing)")
    return path


def _make_folders(folder: Path, option: str) -> list[Path]:
    """Create `folder` and its missing parents; the ones created, deepest last."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    made = []
    try:
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
    except FileExistsError as e:
        _remove_folders(made)
        raise InputError(f"{option} {folder}", f"{e.filename or 'a part of the path'} is there but is not a folder; "
                                               f"fix the path") from None
    except OSError as e:
        _remove_folders(made)
        raise _problem(option, folder, e) from None
    return made


def _remove_folders(made: list[Path]) -> None:
    for p in reversed(made):
        try:
            p.rmdir()
        except OSError:
            pass


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _write_temporary(target: Path, text: str) -> str:
    """`text` in a new temporary file beside `target`, flushed to disk; its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=target.parent)
    try:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = _new_file_mode()
        if hasattr(os, "fchmod"):                # not on Windows
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = None
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if fd is not None:
            os.close(fd)
        _quietly(os.unlink, tmp)
        raise
    return tmp


class _Interrupts:
    """While in use (a context manager): SIGTERM raises KeyboardInterrupt as SIGINT does, so that
    cleanup code runs; inside `deferred()` both wait until its end, so a commit is never cut short.
    (A signal mask would not do: another thread may take a signal sent to the process.)"""

    # SIGHUP too: a closed terminal must not leave temporaries or half a set (no SIGHUP on Windows)
    SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

    def __init__(self):
        self._deferring = False
        self._pending = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self._deferring:
            self._pending = signum
            return
        raise KeyboardInterrupt(f"signal {signum}")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        return False

    @contextmanager
    def deferred(self):
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending is not None:
            raise KeyboardInterrupt(f"signal {self._pending}")


def _commit(staged: list[tuple[str, Path]], option: str) -> None:
    """Rename each temporary onto its target; on a failure, put back what was there."""
    backups, done = [], []
    try:
        for tmp, target in staged:
            check_output_file(target, option)      # a device or folder may have appeared since the check
            if target.exists():
                backups.append((_at(target, option, _keep_old, target, tmp + ".old"), target))
            _at(target, option, os.replace, tmp, target)
            done.append(target)
    except BaseException:
        restored = {t for _, t in backups}
        for backup, target in backups:
            _quietly(os.replace, backup, target)
        for target in done:
            if target not in restored:
                _quietly(os.unlink, target)
        raise
    finally:
        for backup, _ in backups:
            _quietly(os.unlink, backup)


def _keep_old(target: Path, backup: str) -> str:
    try:
        os.link(target, backup)            # the old file stays in place until replaced
    except OSError:
        os.rename(target, backup)          # a file system without hard links
    return backup


def _at(target: Path, option: str, call, *args):
    """call(*args), an OSError reported as the option's one-line problem at `target`."""
    try:
        return call(*args)
    except OSError as e:
        raise _problem(option, target, e) from None


def _quietly(call, *args) -> None:
    try:
        call(*args)
    except OSError:
        pass


def write_files(files: dict[Path, str], option: str) -> None:
    """Write every file of `files` (path -> text) or none of them.

    Each path must hold a regular file or nothing (see `check_output_file`); missing folders are
    created (and removed again if the write fails)."""
    targets = {check_output_file(p, option): text for p, text in files.items()}
    for target, text in targets.items():      # before any file is written, not after some
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputError(f"{option} {target}", f"its text holds {text[e.start]!r}, which is not Unicode "
                                                   f"(a lone surrogate from an input?); fix the input") from None
    staged, made, committed = [], [], False
    try:
        with _Interrupts() as interrupts:
            for target in targets:
                made += _make_folders(target.parent, option)
            for target, text in targets.items():
                staged.append((_at(target, option, _write_temporary, target, text), target))
            with interrupts.deferred():
                _commit(staged, option)
                committed = True
    finally:
        if not committed:
            for tmp, _ in staged:
                _quietly(os.unlink, tmp)
            _remove_folders(made)


def write_file(path: str | Path, text: str, option: str) -> None:
    """Write one file (see `write_files`)."""
    write_files({Path(path): text}, option)


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name the same existing file."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_an_input(output: str | Path, option: str, inputs: list) -> None:
    """Refuse an output path that names one of the command's input files (it would overwrite it)."""
    for path in inputs:
        if path and same_file(path, output):
            raise InputError(f"{option} {output}", f"is also an input ({path}); write to another file")
