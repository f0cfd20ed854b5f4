"""Cutting captures into record-aligned windows (mqtt_cli/pipeline/splits.py), without Spark: every window read
back in order gives exactly the records of the whole file, with the same frame numbers."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from mqtt_cli.capture import open_capture
from mqtt_cli.core import Publish, encode
from mqtt_cli.pipeline.splits import Window, plan_file, read_window, scan, settle
from tests.capture.pcapwriter import Conversation, Interface, pcap, pcapng

from .conftest import sample_captures


def windows_of(path: Path, target: int) -> tuple[list[Window], int, str | None]:
    plan = plan_file(str(path), 0, target)
    return settle(plan, [scan(split) for split in plan.splits])


def all_records(path: Path) -> list[tuple[int | None, int, bytes, int]]:
    with open_capture(str(path)) as source:
        return list(source.records())


def records_of(windows: list[Window]) -> list[tuple[int | None, int, bytes, int]]:
    return [record for window in windows for record in read_window(window)]


@pytest.mark.parametrize("capture", sample_captures(), ids=lambda p: p.name)
@pytest.mark.parametrize("target", [700, 4096])
def test_windows_of_every_sample_give_every_record_once(capture: Path, target: int) -> None:
    windows, packets, error = windows_of(capture, target)
    expected = all_records(capture)
    assert error is None
    assert len(windows) > 2  # cut for real
    assert packets == len(expected)
    assert records_of(windows) == expected
    assert [w.start for w in windows[1:]] == [w.stop for w in windows[:-1]]  # contiguous, record-aligned


def _decoy_capture(tmp_path: Path) -> Path:
    """PUBLISH payloads that are themselves pcap record headers: re-synchronisation must not stop at them."""
    conv = Conversation().handshake()
    fake = struct.pack("<IIII", 1_700_000_000, 5, 40, 40) * 30
    for n in range(200):
        conv.send(encode(Publish(f"t/{n}", fake, 0)))
    path = tmp_path / "decoy.pcap"
    path.write_bytes(pcap(conv.frames()))
    return path


def test_resynchronisation_is_not_fooled_by_headers_in_payloads(tmp_path: Path) -> None:
    path = _decoy_capture(tmp_path)
    for target in (613, 1000, 2999):
        windows, _packets, error = windows_of(path, target)
        assert error is None
        assert records_of(windows) == all_records(path)


def test_pcapng_windows_carry_the_interface_table(tmp_path: Path) -> None:
    # Two interfaces with different link types and resolutions; packets alternate between them.
    conv = Conversation().handshake()
    for n in range(100):
        conv.send(encode(Publish(f"t/{n}", b"x" * 50, 0)))
    frames = conv.frames()
    path = tmp_path / "two.pcapng"
    path.write_bytes(
        pcapng(
            [(n % 2, ts, frame) for n, (ts, frame) in enumerate(frames)],
            [Interface(tsresol=9), Interface(tsresol=6)],
        )
    )
    windows, _packets, error = windows_of(path, 900)
    assert error is None and len(windows) > 5
    assert all(w.prefix.startswith(b"\x0a\x0d\x0d\x0a") for w in windows[1:])  # section header, then interfaces
    assert records_of(windows) == all_records(path)


def test_a_truncated_capture_is_read_up_to_the_damage(tmp_path: Path) -> None:
    whole = sample_captures()[0].read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(whole[: len(whole) - 30])
    windows, packets, error = windows_of(path, 2000)
    assert error is not None and "truncated" in error
    expected = []
    try:
        with open_capture(str(path)) as source:
            for record in source.records():
                expected.append(record)
    except Exception:
        pass
    assert packets == len(expected)
    assert records_of(windows) == expected


def test_compressed_and_small_captures_are_one_window(tmp_path: Path) -> None:
    source = sample_captures()[0]
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(source.read_bytes()))
    for path in (gz, source):
        plan = plan_file(str(path), 0, 1 << 30 if path == source else 100)
        assert [s.kind for s in plan.splits] == ["stream"]
        windows, packets, error = settle(plan, [scan(s) for s in plan.splits])
        assert error is None and packets == len(all_records(source))
        assert records_of(windows) == all_records(source)
