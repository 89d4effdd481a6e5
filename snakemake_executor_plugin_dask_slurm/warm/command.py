"""Snakemake's job command, split into what the warm path needs (pure, standard library).

The general way runs the job command with ``/bin/sh -c``: ``[export NAME='value' ... &&]
<python> -m snakemake <arguments>`` (``RealExecutor.format_job_exec``; a group job's with
``dispatch/group_runner`` in place of ``snakemake``; a group member's that the group's own
Snakemake spawns starts with ``cd <dir> &&``). The warm path runs the same arguments in a
forked process, so it needs them exactly as the shell would pass them. :func:`split_words`
splits the command as a POSIX shell does, and gives up (the job then goes the cold way)
on anything whose meaning a shell would decide: an expansion (``$``, backquotes), a
backslash, a glob or tilde, a comment, any operator but ``&&``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Unquoted characters the shell gives a meaning of its own (``&`` only as ``&&``).
_SPECIAL = set("$`\\*?[;|<>()#~\"'&")
AND = "&&"


class Unsplittable(ValueError):
    """The command needs a shell to mean what it means."""


#: One word: plain characters and quoted parts (double quotes without an expansion or an
#: escape inside).
_WORD = r"""(?:[^ \t\n$`\\*?\[;|<>()#~"'&]+|'[^']*'|"[^"$`\\]*")+"""
#: A whole command of the shapes :func:`split_words` accepts: blanks, ``&&`` where a word
#: could start, and words each ended by a blank or the end.
_ACCEPTED = re.compile(rf"(?:[ \t\n]+|&&|{_WORD}(?=[ \t\n]|\Z))*")
_TOKENS = re.compile(rf"&&|{_WORD}")
#: The parts of a word with quotes: single-quoted, double-quoted, plain.
_PART = re.compile(r"""'([^']*)'|"([^"]*)"|([^'"]+)""")


def split_words(command: str) -> list[str]:
    """The words of ``command`` as ``sh`` would pass them, with ``&&`` as a word of its
    own; raises :class:`Unsplittable` if the shell would interpret any part of it.

    A job command is split once per general-way job on Snakemake's side, so the usual
    shape is read by regular expressions; anything else is left to :func:`_split_slowly`,
    the character-by-character reading that says what does not fit (the two give the same
    words: tests/unit/test_warm_parts.py compares them)."""
    if _ACCEPTED.fullmatch(command) is None:
        return _split_slowly(command)
    return [
        word
        if "'" not in word and '"' not in word
        else "".join(a or b or c for a, b, c in _PART.findall(word))
        for word in _TOKENS.findall(command)
    ]


def _split_slowly(command: str) -> list[str]:
    """:func:`split_words`, one character at a time."""
    words: list[str] = []
    word: list[str] = []
    started = False
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t\n":
            if started:
                words.append("".join(word))
                word, started = [], False
            i += 1
        elif c == "'":
            end = command.find("'", i + 1)
            if end < 0:
                raise Unsplittable("an unterminated single quote")
            word.append(command[i + 1 : end])
            started, i = True, end + 1
        elif c == '"':
            end = command.find('"', i + 1)
            if end < 0:
                raise Unsplittable("an unterminated double quote")
            inner = command[i + 1 : end]
            if any(ch in inner for ch in "$`\\"):
                raise Unsplittable(f"an expansion or escape in double quotes: {inner!r}")
            word.append(inner)
            started, i = True, end + 1
        elif c == "&" and command.startswith(AND, i) and not started:
            words.append(AND)
            i += 2
        elif c in _SPECIAL:
            raise Unsplittable(f"{c!r} outside quotes")
        else:
            word.append(c)
            started, i = True, i + 1
    if started:
        words.append("".join(word))
    return words


@dataclass(frozen=True)
class JobCommand:
    python: str
    module: str
    argv: tuple[str, ...]
    exports: tuple[tuple[str, str], ...]
    #: ``cd <dir> &&`` before it (None: none).
    cd: str | None = None


def parse_job_command(command: str) -> JobCommand:
    """The interpreter, module, arguments and exported variables of a job command (and
    the directory of a leading ``cd``); raises :class:`Unsplittable` (with what does not
    fit) for any other shape."""
    words = split_words(command)
    segments: list[list[str]] = [[]]
    for word in words:
        if word == AND:
            segments.append([])
        else:
            segments[-1].append(word)
    *exports, run = segments
    cd = None
    if exports and exports[0][:1] == ["cd"]:
        if len(exports[0]) != 2 or not exports[0][1].startswith("/"):
            raise Unsplittable(f"a cd that is not 'cd /absolute/dir': {exports[0]}")
        cd = exports.pop(0)[1]
    pairs: list[tuple[str, str]] = []
    for segment in exports:
        if not segment or segment[0] != "export" or len(segment) < 2:
            raise Unsplittable(f"a command before the job's Snakemake: {' '.join(segment)!r}")
        for item in segment[1:]:
            name, equals, value = item.partition("=")
            if not equals or not _NAME.match(name):
                raise Unsplittable(f"an export that is not NAME=value: {item!r}")
            pairs.append((name, value))
    if len(run) < 3 or run[1] != "-m":
        raise Unsplittable(f"a command that is not '<python> -m <module> ...': {run[:3]}")
    return JobCommand(run[0], run[2], tuple(run[3:]), tuple(pairs), cd)
