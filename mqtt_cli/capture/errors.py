"""What can go wrong with a capture file, as exceptions the command turns into one-line messages."""

from __future__ import annotations

__all__ = ["CaptureError", "CorruptCapture", "NotACapture"]


class CaptureError(Exception):
    """A capture that cannot be read (further). The message says what and where."""


class NotACapture(CaptureError):
    """The input is none of the formats we read (pcap, pcapng, optionally compressed)."""


class CorruptCapture(CaptureError):
    """The capture is truncated or damaged at `offset`; everything before it has been read."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
