"""One structured line per event on stderr (logfmt): `level=info event=indexed path=... `.

Timestamps are left out when journald is the sink ($JOURNAL_STREAM): it adds its own.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from .core.text import visible

LOGGER = "ckpt"


class LogfmtFormatter(logging.Formatter):
    def __init__(self, *, timestamps: bool) -> None:
        super().__init__()
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {}
        if self.timestamps:
            fields["ts"] = self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z")
        fields["level"] = record.levelname.lower()
        fields["event"] = record.getMessage()
        fields.update((k, v) for k, v in getattr(record, "fields", {}).items() if v is not None)
        if record.exc_info and record.levelno >= logging.ERROR:
            fields["error"] = repr(record.exc_info[1])
        return " ".join(f"{key}={_quote(value)}" for key, value in fields.items())


def _quote(value: Any) -> str:
    # A file name may hold ESC, CR or a newline: shown escaped, it can neither drive the
    # terminal that tails the journal nor forge a log line.
    text = "" if value is None else visible(value)
    if not text or any(ch in text for ch in ' "=\\'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter(timestamps="JOURNAL_STREAM" not in os.environ))
    logger = logging.getLogger(LOGGER)
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def event(name: str, *, level: int = logging.INFO, **fields: Any) -> None:
    logging.getLogger(LOGGER).log(level, name, extra={"fields": fields})
