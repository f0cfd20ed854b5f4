"""``mqtt dump``: decode the MQTT traffic in a capture (or a raw byte stream) and show every packet.

Thin on purpose: flags are checked here, decoding is `mqtt_cli.capture`, output is `mqtt_cli.render`.
No `from __future__ import annotations`: typer would then evaluate every annotation string when the app starts.
"""

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer

from mqtt_cli import PROG_NAME
from mqtt_cli.commands import fail, say

# Exit codes of `mqtt dump` (docs/exit-codes.md): 1 also for a truncated or corrupt capture, after decoding
# everything readable in it; 3 when the input is not a capture at all.
from mqtt_cli.exit_codes import EXIT_FAILURE, EXIT_NOT_A_CAPTURE, EXIT_OK, EXIT_USAGE

from ._capture import Detect, Ports, ProtocolVersion, TlsPorts, capture_ports, checked

if TYPE_CHECKING:
    from collections import Counter

    from mqtt_cli.capture.filters import RecordFilter
    from mqtt_cli.capture.stats import DumpStats

_RAW_CHUNK = 1 << 16
_PROGRESS_MIN_BYTES = 8 << 20


def dump(
    file: Annotated[
        str | None,
        typer.Argument(
            help="Capture to decode: pcap or pcapng (gzip, bzip2 or xz compressed too); - for standard input.",
            show_default=False,
        ),
    ] = None,
    port: Ports = None,
    tls_port: TlsPorts = None,
    detect: Detect = True,
    hex_input: Annotated[
        str | None,
        typer.Option(
            "--hex",
            help="Decode these bytes (hex; one or more packets of one direction) instead of a file.",
            show_default=False,
        ),
    ] = None,
    raw: Annotated[
        str | None,
        typer.Option(
            "--raw", help="Decode a raw MQTT byte stream of one direction (- for standard input).", show_default=False
        ),
    ] = None,
    protocol_version: ProtocolVersion = None,
    json_lines: Annotated[
        bool, typer.Option("--json", "-j", help="JSON lines (docs/dump-format.md), every packet one object.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Every field and property, payloads in hex and text.")
    ] = False,
    stats: Annotated[bool, typer.Option("--stats", help="End with a summary (to standard error with --json).")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No per-packet output (with --stats: the summary only).")
    ] = False,
    packet_type: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            help="Only packets of this type, e.g. PUBLISH (repeatable, or comma-separated).",
            show_default=False,
        ),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            help="Only packets with a topic matching this filter, wildcards allowed (repeatable).",
            show_default=False,
        ),
    ] = None,
    client: Annotated[
        list[str] | None,
        typer.Option(
            "--client",
            help="Only packets of connections with this client id; globs allowed (repeatable).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Decode the MQTT packets in a capture, checking every protocol rule.

    pcap and pcapng (compressed too); Ethernet/VLAN, Linux cooked, BSD loopback, raw IP; IPv4 and IPv6.

    TCP is reassembled (out of order, retransmitted, overlapping segments); capture gaps are reported.

    Live traffic: tcpdump -U -w - port 1883 | mqtt dump -

    Exit codes: 0 done, 1 cannot open, truncated/corrupt capture (after decoding what is readable) or no frame of a
    link type we read, 2 bad usage, 3 not a capture file.
    """
    import gc

    from mqtt_cli.capture import CaptureError, CorruptCapture, NotACapture
    from mqtt_cli.capture.filters import RecordFilter

    # Everything imported so far lives as long as the process: keep the collector from walking it again and
    # again while millions of short-lived records come and go.
    gc.freeze()

    inputs = [name for name, value in (("FILE", file), ("--hex", hex_input), ("--raw", raw)) if value is not None]
    if len(inputs) != 1:
        what = "no input" if not inputs else f"{' and '.join(inputs)} together"
        fail(f"{what}: give one capture FILE (- for standard input), or --hex HEX, or --raw FILE", EXIT_USAGE)
    version = checked(protocol_version, port, tls_port)
    try:
        keep = RecordFilter(packet_type or (), topic or (), client or ())
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)

    summary: DumpStats | None = None
    if stats:
        from mqtt_cli.capture.stats import DumpStats as Summary

        summary = Summary()
    out = _Output(json_lines, verbose, quiet, keep, summary)
    try:
        if file is not None:
            from mqtt_cli.capture import Dissector, open_capture

            with open_capture(file) as source:
                out.live = source.size is None  # a pipe or a FIFO: show each packet as it comes
                dissector = Dissector(
                    *capture_ports(port, tls_port),
                    detect=detect,
                    version=version,
                    keep_objects=not json_lines,
                    json_text=out.fast,  # records go straight to JSON text when nothing looks into them
                )
                frames = source.records()
                if _show_progress(source.size, quiet):
                    from mqtt_cli.render import with_progress

                    frames = with_progress(frames, source.position, source.size or 0, source.name)
                try:
                    out.write_batches(dissector.batches(frames))
                finally:
                    if summary is not None:
                        _print_stats(summary, dissector.stats.as_dict(), json_lines)
                _unsupported_link_types(dissector.stats.unsupported, dissector.stats.frames)
        else:
            from mqtt_cli.capture.rawstream import decode_stream, parse_hex

            if hex_input is not None:
                try:
                    chunks: Any = [parse_hex(hex_input)]
                except ValueError as exc:
                    fail(f"--hex: {exc}", EXIT_USAGE)
            else:
                chunks = _raw_chunks(raw or "-")
                out.live = raw == "-"
            try:
                out.write(decode_stream(chunks, version, keep_objects=not json_lines))
            finally:
                if summary is not None:
                    _print_stats(summary, None, json_lines)
    except NotACapture as exc:
        fail(f"{exc} (for a raw MQTT byte stream use --raw)" if exc.unknown_format else str(exc), EXIT_NOT_A_CAPTURE)
    except CorruptCapture as exc:
        fail(f"{exc}; the packets before that point were decoded", EXIT_FAILURE)
    except CaptureError as exc:
        fail(str(exc), EXIT_FAILURE)
    except BrokenPipeError:
        _stdout_gone()


@dataclass
class _Output:
    """Where records go: JSON lines or lines/trees for people, through the filters, counted for --stats."""

    json_lines: bool
    verbose: bool
    quiet: bool
    keep: "RecordFilter"
    summary: "DumpStats | None"
    live: bool = False  # flush every record (the input is a pipe: someone is watching)

    @property
    def fast(self) -> bool:
        """Nothing looks into the records: they may come as JSON text already."""
        return self.json_lines and not self.quiet and self.summary is None and not self.keep.active

    def write_batches(self, batches: Iterable[list[Any]]) -> None:
        """Lists of records at a time (capture.Dissector.batches)."""
        if self.fast:
            from mqtt_cli.jsonlines import JsonLines

            writer = JsonLines(batch=1 if self.live else 2048)
            try:
                writer.write_batches(batches)  # the hot loop: nothing to filter, count or render
            finally:
                writer.close()
        else:
            self.write(chain.from_iterable(batches))

    def write(self, records: Iterable[Any]) -> None:
        writer: Any = None
        if not self.quiet:
            if self.json_lines:
                from mqtt_cli.jsonlines import JsonLines

                writer = JsonLines(batch=1 if self.live else 2048)
            else:
                from mqtt_cli.render import PacketLines, PacketTrees

                console = None
                if sys.stdout.isatty():
                    from rich.console import Console

                    console = Console(highlight=False)
                writer = (PacketTrees if self.verbose else PacketLines)(console=console, flush=self.live)
        keep, summary = self.keep, self.summary
        try:
            for rec in records:
                shown = not keep.active or keep(rec)
                if summary is not None:
                    summary.add(rec, shown)
                if shown and writer is not None:
                    writer.write(rec)
        finally:
            if writer is not None:
                writer.close()


def _unsupported_link_types(skipped: "Counter[int]", frames: int) -> None:
    """One line on standard error for frames of link types we cannot read; an error (exit 1) when that is every
    frame of the capture: nothing in it could be read, as for a capture that cannot be opened."""
    if not skipped:
        return
    from mqtt_cli.capture.frames import linktype_name

    count = sum(skipped.values())
    kinds = ", ".join(linktype_name(linktype) for linktype in sorted(skipped))
    what = f"link type {kinds} is" if len(skipped) == 1 else f"link types {kinds} are"
    if count >= frames:
        fail(f"{what} not supported: all {count:,} frames skipped, nothing decoded", EXIT_FAILURE)
    say(f"{PROG_NAME}: warning: {what} not supported: {count:,} of {frames:,} frames skipped")


def _show_progress(size: int | None, quiet: bool) -> bool:
    """A progress bar for a big file, when standard error is a terminal that packet lines do not scroll."""
    big = bool(size and size >= _PROGRESS_MIN_BYTES)
    return big and sys.stderr.isatty() and (quiet or not sys.stdout.isatty())


def _raw_chunks(path: str) -> Iterator[bytes]:
    from mqtt_cli.capture import CaptureError
    from mqtt_cli.capture.sources import open_binary

    stream: BinaryIO
    stream, name, _size = open_binary(path)
    try:
        while True:
            try:
                chunk = stream.read(_RAW_CHUNK)
            except OSError as exc:
                raise CaptureError(f"cannot read {name}: {exc.strerror or exc}") from None
            if not chunk:
                return
            yield chunk
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _print_stats(summary: "DumpStats", capture: dict[str, int] | None, json_lines: bool) -> None:
    from mqtt_cli.render import print_whole, stats_tables

    print_whole(stats_tables(summary, capture), stderr=json_lines)


def _stdout_gone() -> None:
    """The reader of our output went away (`| head`): stop quietly, without a traceback at exit."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise typer.Exit(EXIT_OK)
