"""One exception hierarchy; each class carries its CLI exit code and a one-line message.

Every exception the package raises on purpose is defined here, and `EXIT_CODES` is the one
table of what `ckpt` exits with (docs/cli-contract.md shows it; tests/e2e/test_cli_contract.py
keeps the two equal). Modules that raise these re-export the names they always had
(`fsops.Refused`)."""

from __future__ import annotations

# The `ckpt` exit codes: every class below carries one of these.
EXIT_CODES: dict[int, str] = {
    0: "ok",
    1: "unexpected error",
    2: "usage or config error",
    3: "some items failed",
    4: "lease held by another process",
    5: "catalog schema behind (run `ckpt db upgrade`)",
    6: "not found",
    130: "interrupted (Ctrl-C)",
    141: "output closed early (the reader of a pipe left, as `head` does); nothing said",
}


def exit_code_text() -> str:
    """The table as one sentence: "Exit codes: 0 ok, 1 unexpected error, ..."."""
    return "Exit codes: " + ", ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + "."


class CkptError(Exception):
    """Base of every error we raise on purpose. `str(e)` is the one-line message."""

    exit_code = 1


class UsageError(CkptError):
    exit_code = 2


class DaemonRunning(UsageError):
    """A daemon of the same node identity already runs against the catalog."""


class ConfigError(UsageError):
    """Bad configuration: names the key path and the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"config: {key}: {reason}")
        self.key = key
        self.reason = reason


class CatalogUnreachable(CkptError):
    """The catalog's database server could not be reached (PostgreSQL: down, wrong host, no
    such database, refused credentials)."""


class PartialFailure(CkptError):
    """Some items of a batch failed (each already reported); the others were done."""

    exit_code = 3


class LeaseHeld(CkptError):
    exit_code = 4


class LeaseLost(LeaseHeld):
    """A held lease could not be renewed and another process took the run: the work stops."""


class SchemaBehind(CkptError):
    exit_code = 5


class NotFound(CkptError):
    exit_code = 6


# File operations (raised by `fs`, `transforms` and the use cases that call them).


class Refused(CkptError):
    """A file operation we will not do, with the one-line reason (the item is skipped)."""

    exit_code = 3


class RenameUnsupported(Refused):
    """rename(2) failed as it does where a root cannot rename (an object store's FUSE mount,
    a folder on another mount than the trash): the trash is kept in the catalog there
    (a delayed delete, `usecases.rail`), nothing was moved."""


class NotARegularFile(Refused):
    """A symlink, a FIFO, a socket or a device where a file was expected: never read."""


class NameTooLong(Refused):
    """A name we would have to create does not fit in one file name (255 bytes): nothing is
    written (`fs.name_limits`)."""


class WouldReplace(CkptError):
    """A new file would take the name of one we did not create: refused, nothing written."""

    exit_code = 2


class Changed(CkptError):
    """The name no longer holds the file we read (or a writer has it open): nothing replaced.
    `fsops` turns it into `Refused` for its callers."""

    exit_code = 3


class NotScanned(CkptError):
    """Weights the integrity scan does not read (a legacy torch file, a big-endian one, a DCP
    item stored transformed): the stage says `not scanned`, never healthy, never failed."""


class TooHostile(UsageError):
    """The file is legal HDF5 but beyond what a rewrite takes on: nothing written."""


class ArtifactMismatch(CkptError):
    """The artifact written differs from its source (a bug or a failing disk): never renamed."""


class VerifyFailed(CkptError):
    """The rewritten file does not read back as the source: nothing was replaced."""


class HashMismatch(Refused):
    """Bytes received (from the object store) are not the ones the catalog indexed: nothing was
    published."""


class BadArchive(Refused):
    """A tar object (a checkpoint of several files, tiered) we will not write or unpack: a
    link, a device, an absolute or escaping name, a duplicate, a broken header (`core.ustar`):
    nothing was published."""


class RemoteFailed(CkptError):
    """The object store did not do what was asked (unreachable after the retries, refused,
    or its copy is not the bytes indexed): nothing local was freed."""

    exit_code = 3


# Reader outcomes: raised by the `formats` readers, turned into catalog statuses by the indexer.


class ReadProblem(CkptError):
    """A checkpoint candidate that could not be indexed as `ok`."""


class NotACheckpoint(ReadProblem):
    """The file is something else (a dataset `.h5`, an unrelated zip): skipped, not recorded."""


class CorruptCheckpoint(ReadProblem):
    """The file claims to be a checkpoint but its content is broken (truncated, garbage)."""


class PickleRefused(CorruptCheckpoint):
    """A pickle names or calls what the allow-list lacks (formats.pickle_allowed): not
    unpickled, nothing of it run."""


class UnreadableCheckpoint(ReadProblem):
    """The OS refused to let us read it (permissions, I/O error)."""


class NotReady(ReadProblem):
    """Still being written (locked by its writer, changed during the read): retry later."""


class UnfinishedSave(ReadProblem):
    """A folder save showing signs of a save in flight (an Orbax tmp name, no DCP `.metadata`, a
    short data file): `incomplete` or `abandoned`, judged by `core.save_verdict`, never corrupt."""


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message or TFRecord (core.protowire); readers of
    event files turn it into a note, never into a failure."""
