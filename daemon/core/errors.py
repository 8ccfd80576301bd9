"""One exception hierarchy; each class carries its CLI exit code and a one-line message."""

from __future__ import annotations


class CkptError(Exception):
    """Base of every error we raise on purpose. `str(e)` is the one-line message."""

    exit_code = 1


class UsageError(CkptError):
    exit_code = 2


class ConfigError(UsageError):
    """Bad configuration: names the key path and the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"config: {key}: {reason}")
        self.key = key
        self.reason = reason


class PartialFailure(CkptError):
    exit_code = 3


class LeaseHeld(CkptError):
    exit_code = 4


class LeaseLost(LeaseHeld):
    """A held lease could not be renewed and another process took the run: the work stops."""


class SchemaBehind(CkptError):
    exit_code = 5


class NotFound(CkptError):
    exit_code = 6


# Reader outcomes: raised by the `formats` readers, turned into catalog statuses by the indexer.


class ReadProblem(CkptError):
    """A checkpoint candidate that could not be indexed as `ok`."""


class NotACheckpoint(ReadProblem):
    """The file is something else (a dataset `.h5`, an unrelated zip): skipped, not recorded."""


class CorruptCheckpoint(ReadProblem):
    """The file claims to be a checkpoint but its content is broken (truncated, garbage)."""


class UnreadableCheckpoint(ReadProblem):
    """The OS refused to let us read it (permissions, I/O error)."""


class NotReady(ReadProblem):
    """Still being written (locked by its writer, changed during the read): retry later."""
