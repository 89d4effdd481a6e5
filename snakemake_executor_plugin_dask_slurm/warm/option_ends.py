"""A warm job's argument parse without configargparse's repeated walk of its command line.

ConfigArgParse 1.10 (Snakemake's command line) asks, for each of the parser's ~200
options, whether the command line gives it already (``already_on_command_line``, for the
defaults it records), and each question first finds where this parser's own arguments
end (``ArgumentParser._find_end_of_this_parsers_args``): a walk over the whole job command
(~60 arguments) and, per argument, over the parser's actions. That is ~19 of the ~28 ms
of CPU a warm job's parse takes, in every job (docs/benchmarks.md, issue 46); the answer
is the same each time, for the same parser and the same arguments.

:func:`remember_ends` gives a parser a memo of that answer, kept for one
``parse_known_args`` call (started empty, dropped at its end) and keyed by the arguments
themselves: exact, because the answer depends only on them and on the parser's options,
which a parse does not change. Only where the code it stands in for is the code it was
checked against (:data:`CHECKED`, the sources of the function and of everything it
calls): a ConfigArgParse that changed any of them parses as it does (:func:`applicable`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any

#: ConfigArgParse's functions whose answers the memo stands in for: the method, what it
#: calls, and the function that asks it (which must keep asking the parser for it).
FUNCTIONS = (
    "ArgumentParser._find_end_of_this_parsers_args",
    "ArgumentParser._find_where_args_stop_being_read_as_options",
    "ArgumentParser._find_subcommand_index",
    "ArgumentParser._indexes_of_positional_args",
    "ArgumentParser._has_a_remainder_positional",
    "ArgumentParser._arg_is_an_option_that_takes_every_later_arg",
    "ArgumentParser._arg_is_read_as_an_option",
    "ArgumentParser._find_option_that_takes_its_values_from_later_args",
    "_dispatches_to_subparsers",
    "already_on_command_line",
)
#: The SHA-256 of their sources (ConfigArgParse 1.10.2), as :func:`fingerprint` makes it.
CHECKED = "0c923c9baf33050b3a268fcdff888b4e84f7bfd25e513e08541d790b139ae78e"

_MEMO = "_dask_slurm_option_ends"


def fingerprint(module: Any) -> str | None:
    """The SHA-256 of the sources of :data:`FUNCTIONS` in ``module`` (None: one of them is
    missing or has no source)."""
    digest = hashlib.sha256()
    for name in FUNCTIONS:
        found: Any = module
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is None:
            return None
        try:
            digest.update(inspect.getsource(found).encode())
        except (OSError, TypeError):
            return None
    return digest.hexdigest()


@functools.cache
def _checked() -> bool:
    """Whether ConfigArgParse's code is the checked one (read once per process: ~5 ms)."""
    import configargparse

    return fingerprint(configargparse) == CHECKED


def applicable(parser: Any) -> bool:
    """Whether ``parser`` is a ConfigArgParse parser whose code is the checked one."""
    import configargparse

    return isinstance(parser, configargparse.ArgumentParser) and _checked()


def remember_ends(parser: Any) -> bool:
    """Give ``parser`` (one instance) the memo; False, and nothing changed, where it is not
    :func:`applicable` or has it already."""
    if getattr(parser, _MEMO, False) or not applicable(parser):
        return False
    find_end: Callable[[Any], Any] = parser._find_end_of_this_parsers_args
    parse_known_args: Callable[..., Any] = parser.parse_known_args
    memo: dict[tuple[Any, ...], Any] | None = None

    def _find_end_of_this_parsers_args(args: Any) -> Any:
        if memo is None:
            return find_end(args)
        try:
            key = tuple(args)
            return memo[key]
        except KeyError:
            found = memo[key] = find_end(args)
            return found
        except TypeError:  # an argument that cannot be a key
            return find_end(args)

    def parse_known_args_remembering(*args: Any, **kwargs: Any) -> Any:
        nonlocal memo
        outer = memo is None
        if outer:
            memo = {}
        try:
            return parse_known_args(*args, **kwargs)
        finally:
            if outer:
                memo = None

    parser._find_end_of_this_parsers_args = _find_end_of_this_parsers_args
    parser.parse_known_args = parse_known_args_remembering
    setattr(parser, _MEMO, True)
    return True
