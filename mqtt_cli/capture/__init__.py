"""Reading captured MQTT traffic: capture files, link layers, TCP reassembly, per-connection decoding.

The pieces stand alone so that `mqtt dump` and the Spark pipeline can each use what they need:

* `sources.open_capture(path)`: a file or "-", pcap or pcapng, maybe compressed; `.records()` yields
  (timestamp in ns, link type, frame bytes, frame number).
* `frames.decode_frame(linktype, frame)`: the TCP segment in a frame (flow, seq, ack, flags, payload, missing).
* `tcp.HalfStream`: reassembly of one direction (out-of-order, retransmitted, overlapping segments; gaps).
* `decoder.DirectionDecoder`: MQTT packets of one direction through the core codec, re-synchronised after gaps.
* `records.RecordBuilder`: decoded packets as dicts in the dump format (docs/dump-format.md).
* `dissector.Dissector`: all of the above over a capture: frames in, records out.
* `rawstream.decode_stream`: the same records from a bare byte stream (`--raw`, `--hex`).

Nothing here prints: rendering belongs to the commands.
"""

from .dissector import Dissector, DissectorStats
from .errors import CaptureError, CorruptCapture, NotACapture
from .records import PACKET_TYPES, RecordBuilder, format_ts
from .sources import CaptureSource, open_capture

__all__ = [
    "PACKET_TYPES",
    "CaptureError",
    "CaptureSource",
    "CorruptCapture",
    "Dissector",
    "DissectorStats",
    "NotACapture",
    "RecordBuilder",
    "format_ts",
    "open_capture",
]
