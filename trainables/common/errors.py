"""Reading an exception: its first line, and a cause of a given kind anywhere in its chain; and the errors of
the loop's inputs that the search catches too (DataError, EnvironmentFault). Used by the loop and by the
search (which must not reach into the loop for them)."""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def first_line(err: BaseException) -> str:
    """The first line of an error's message (some, like a bare MemoryError, have none)."""
    lines = str(err).splitlines()
    return lines[0] if lines else type(err).__name__


def find_cause(err: BaseException | None, kind: type[E]) -> E | None:
    """`err` or the first exception in its chain that is a `kind` (Inductor wraps what it catches in
    InductorError; a library's clean-up may raise over an interrupt), else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, kind):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


class DataError(ValueError):
    """A corpus that cannot be used; the message is one line naming the path (the CLI exits 2 on it)."""


class EnvironmentFault(Exception):
    """The machine cannot run what was asked (Ray cannot start or be reached, no CUDA for a config that needs
    it): not bad input, so its own exit code (trainables.common.exit_codes.Exit.ENVIRONMENT)."""
