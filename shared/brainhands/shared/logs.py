"""Structured (JSON) logs: one object per line, with the identifiers a reader searches by."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is kept.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# One encoder for every record: json.dumps(..., default=str) builds a new one each call.
_ENCODE = json.JSONEncoder(default=str).encode


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts", "level", "logger", "msg", ...extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return _ENCODE(data)


def configure_logging(*, json_lines: bool, level: int = logging.INFO) -> None:
    """Log to stderr: JSON lines for worker processes, plain text for operator commands."""
    # Neither format prints where a call was made, nor its thread or process: records skip
    # looking them up (the logging docs' "Optimization"; about 15% of a record's cost).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.Formatter.converter = time.gmtime
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("aiormq").setLevel(logging.WARNING)
    logging.getLogger("aiormq.connection").addFilter(_not_a_failed_attempt)
    logging.getLogger("aio_pika").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _not_a_failed_attempt(record: logging.LogRecord) -> bool:
    """Drops aiormq's error line for a connection attempt that failed: whoever made the
    attempt says so once (``shared.startup`` while a process starts, aio-pika's robust
    connection while it runs), and aiormq's repeated it, at error level, at every attempt."""
    return not str(record.msg).startswith("error when creating transport")
