"""What can go wrong with a capture file, as exceptions the command turns into one-line messages."""

from __future__ import annotations

__all__ = ["CaptureError", "CorruptCapture", "NotACapture"]


class CaptureError(Exception):
    """A capture that cannot be read (further). The message says what and where."""


class NotACapture(CaptureError):
    """The input is none of the formats we read (pcap, pcapng, optionally compressed). `unknown_format`: its
    content is of no known kind (it might be something else a command reads, e.g. a raw MQTT byte stream); the
    message says what was found, each command says what it can do instead."""

    def __init__(self, message: str, unknown_format: bool = False) -> None:
        super().__init__(message)
        self.unknown_format = unknown_format


class CorruptCapture(CaptureError):
    """The capture is truncated or damaged at `offset`; everything before it has been read."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
