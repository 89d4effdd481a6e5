"""What parsing a workflow read, and whether it did anything a parse must not.

Snakemake's job command parses the workflow again for every job; the warm path parses it
once. That gives the same result only while what the parse read is unchanged, and only if
the parse had no effect that the cold way would repeat for every job. While a primed
server parses, a :class:`Recorder` (a ``sys.addaudithook`` hook, active only then) notes

- every file the parse opened for reading and every directory it listed (the Snakefile,
  included files, config files, sample sheets, ``glob_wildcards``), with what
  ``os.stat`` said at that moment: the :class:`Fingerprint` a job checks before it
  runs; the workflow's own Python modules come from ``sys.modules``;
- every effect of the workflow's own code (a file written, removed or renamed, a
  temporary file, a command run): the cold way would do it again for every job, the warm
  path once, so such a workflow goes the cold way. Effects of Snakemake itself (its
  source cache, its temporary directory) are its own and are the same either way.

Standard library only.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

#: (st_mtime_ns, st_size, st_ino, st_ctime_ns), or None when the path did not exist.
Stamp = tuple[int, int, int, int] | None

#: Audit events that change something outside the process.
EFFECT_EVENTS = frozenset(
    {
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.utime",
        "os.link",
        "os.symlink",
        "shutil.rmtree",
        "shutil.move",
        "shutil.copyfile",
        "shutil.copytree",
        "tempfile.mkstemp",
        "tempfile.mkdtemp",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "pty.spawn",
    }
)
LISTING_EVENTS = frozenset({"os.listdir", "os.scandir"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Effect(BaseException):
    """Raised by the hook at the workflow's first effect: the parse stops there (the
    workflow goes the cold way; the rest of its parse would only cost time). A
    BaseException, so that Snakemake's handlers of Exception let it through."""


def stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    roots = {paths[name] for name in names if name in paths}
    roots.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


def own_roots() -> tuple[str, ...]:
    """Where Snakemake's and this plugin's code are: what they read is not the workflow's."""
    from ..snakemake_internals.cli import package_dir

    roots = {package_dir(), os.path.dirname(os.path.dirname(__file__))}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def _is_write(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


@dataclass
class Recorder:
    """The audit hook of one parse (install once with :meth:`install`, then
    :meth:`start` / :meth:`stop` around the parse)."""

    #: Paths under these are the interpreter's and its libraries': never fingerprinted.
    library_roots: tuple[str, ...] = field(default_factory=_library_roots)
    #: Where Snakemake's own code lives (the package directory): its effects are its own.
    own_roots: tuple[str, ...] = ()
    active: bool = False
    reads: dict[str, Stamp] = field(default_factory=dict)
    listed: dict[str, Stamp] = field(default_factory=dict)
    effects: list[str] = field(default_factory=list)
    _installed: bool = False

    def install(self) -> None:
        if not self._installed:
            sys.addaudithook(self._hook)
            self._installed = True

    def start(self) -> None:
        self.reads.clear()
        self.listed.clear()
        self.effects.clear()
        self.active = True

    def stop(self) -> None:
        self.active = False

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        try:
            if event == "open":
                self._open(args, sys._getframe(1))
            elif event in LISTING_EVENTS:
                self._listing(args, sys._getframe(1))
            elif event in EFFECT_EVENTS:
                self._effect(event, args, sys._getframe(1))
        except Exception:  # never break the parse; a missed path is a missed path
            return
        if self.effects:
            self.active = False
            raise Effect(self.effects[0])

    def _open(self, args: tuple[Any, ...], frame: FrameType) -> None:
        path, mode, flags = (*args, None, None, None)[:3]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str | os.PathLike):
            return  # an fd
        path = os.path.abspath(os.fspath(path))
        if _is_write(mode, flags):
            self._effect("open for writing", (path,), frame)
        elif not self._library_path(path) and path not in self.reads:
            self.reads[path] = stamp(path)

    def _listing(self, args: tuple[Any, ...], frame: FrameType) -> None:
        path = args[0] if args else None
        path = os.path.abspath(os.fspath(path) if path is not None else ".")
        if self._library_path(path) or path in self.listed or _in_import(frame):
            return
        self.listed[path] = stamp(path)

    def _effect(self, event: str, args: tuple[Any, ...], frame: FrameType) -> None:
        caller = self._caller(frame)
        if caller is not None:
            what = " ".join(str(a) for a in args[:2])
            self.effects.append(f"{event} {what} (at {caller})")

    def _library_path(self, path: str) -> bool:
        return path.startswith(("/proc/", "/sys/", "/dev/")) or path.startswith(self.library_roots)

    def _caller(self, frame: FrameType | None) -> str | None:
        """Where the workflow's own code caused this (``file:line``), or None when the
        nearest code outside the standard library is Snakemake's (or the import
        machinery's)."""
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith("<frozen importlib"):
                return None
            if name.startswith(self.own_roots):
                return None
            if not name.startswith("<") and not name.startswith(self.library_roots):
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return None


def _in_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@dataclass(frozen=True)
class Fingerprint:
    """The stamps of what a parse read and listed; :meth:`changed` is a job's check."""

    stamps: tuple[tuple[str, Stamp], ...]

    @classmethod
    def of(
        cls,
        reads: Mapping[str, Stamp],
        listed: Mapping[str, Stamp],
        modules: Iterable[str],
        skip: tuple[str, ...] = (),
    ) -> Fingerprint:
        """From a :class:`Recorder`'s reads and listings plus the source files of the
        modules the parse imported (stamped now), leaving out paths under ``skip``."""
        found: dict[str, Stamp] = {}
        for path, st in (*reads.items(), *listed.items()):
            if not path.startswith(skip):
                found.setdefault(path, st)
        for path in modules:
            if not path.startswith(skip) and path not in found:
                found[path] = stamp(path)
        return cls(tuple(sorted(found.items())))

    def changed(self) -> str | None:
        """The first path whose stamp changed since the parse (None: none did)."""
        for path, st in self.stamps:
            if stamp(path) != st:
                return path
        return None

    def __len__(self) -> int:
        return len(self.stamps)


def module_sources(names: Iterable[str], library_roots: tuple[str, ...]) -> list[str]:
    """Source files of the modules ``names`` that are the workflow's own (not under the
    interpreter's or its libraries' directories)."""
    found = []
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        path = os.path.abspath(path)
        if path.startswith(library_roots):
            continue
        if path.endswith((".pyc", ".pyo")):
            spec = getattr(module, "__spec__", None)
            origin = getattr(spec, "origin", None)
            if isinstance(origin, str) and os.path.exists(origin):
                path = origin
        found.append(path)
    return found
