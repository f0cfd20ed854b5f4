"""Topic aliases through ingest and every report (terminal, JSON, HTML), the report's queries run together giving
what they give one at a time, and the HTML page looked at in headless Chromium (a screenshot kept as an
artefact, checked from the page's DOM and the picture's pixels)."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mqtt_cli.core import ConnAck, Connect, Disconnect, PubAck, PubComp, Publish, PubRec, PubRel, encode
from mqtt_cli.pipeline.dissect import DissectOptions
from mqtt_cli.pipeline.html import report_html
from mqtt_cli.pipeline.ingest import ingest
from mqtt_cli.pipeline.report import LATENCY_LABELS, build_report
from mqtt_cli.pipeline.tables import report_tables
from tests.capture.loopback import PUB_LINES, pub_lines_capture
from tests.capture.pcapwriter import Conversation, pcap

from ..conftest import REPO_ROOT

ARTEFACTS = REPO_ROOT / "build" / "artefacts"  # git-ignored: screenshots to look at after a run
MS = 1_000_000
S = 1_000 * MS


@pytest.fixture(scope="module")
def pub_lines_table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("aliases")
    capture, port = pub_lines_capture(tmp)
    ingest(spark, [str(capture)], str(tmp / "table"), DissectOptions(ports=(port,)))
    return capture, tmp / "table"


@pytest.mark.slow
@pytest.mark.interop
def test_ingest_and_report_resolve_the_aliases_of_mqtt_pub_lines(
    spark: Any, pub_lines_table: tuple[Path, Path]
) -> None:
    _capture, table = pub_lines_table
    rows = spark.read.parquet(str(table)).where("type = 'PUBLISH'").collect()
    by_topic: dict[str, list[Any]] = {}
    for row in rows:
        by_topic.setdefault(row["resolved_topic"], []).append(row)
    assert {topic: len(found) for topic, found in by_topic.items()} == PUB_LINES
    for topic, found in by_topic.items():
        # The wire's topic stays visible: set once with alias 1, then empty with alias 1.
        assert sorted((r["topic"], r["topic_alias"]) for r in found)[-1] == (topic, 1)
        assert sum(r["topic"] == "" for r in found) == len(found) - 1 and all(r["topic_alias"] == 1 for r in found)
        assert sorted(r["payload"] for r in found) == sorted(f"{topic} line {n}".encode() for n in range(len(found)))
    report = build_report(spark, str(table))
    assert {t["topic"]: t["messages"] for t in report["topics"]} == PUB_LINES
    assert {s["name"] for s in report["timeline"]["series"] if s["kind"] == "topic"} == set(PUB_LINES)
    console = Console(record=True, width=160)
    console.print(report_tables(report))
    text = console.export_text()
    assert "(empty" not in text and "cap/lines" in text
    page = report_html(report)
    assert "<td></td>" not in page and "(empty" not in page and "<td>cap/lines</td>" in page


def test_queries_run_together_give_what_they_give_one_at_a_time(spark: Any, pages_table: Path) -> None:
    together = build_report(spark, str(pages_table))
    alone = build_report(spark, str(pages_table), concurrent=False)
    together.pop("seconds")
    alone.pop("seconds")
    assert together == alone
    json.dumps(together)


# --- the HTML page in Chromium -----------------------------------------------------------------------------------


def _pages_capture(path: Path) -> None:
    """Six publishers (six topics) over 90 s, each at its own rate; QoS 1 acknowledged after 0.1 to 200 ms with a
    gap in between (empty histogram bins), QoS 2 flows: the rate chart has seven lines, both histograms bars."""
    ts = 1_700_000_000_000_000_000
    convs = []
    for n in range(6):
        c = Conversation(cport=41000 + n, ts=ts + n * MS, step=MS).handshake()
        c.send(encode(Connect(f"pub{n}")))
        c.send(encode(ConnAck()), False)
        pid = 1
        for k in range(3 * (n + 1)):
            c.step = (90 * S) // (3 * (n + 1))
            qos = 2 if k % 5 == 4 else 1
            c.send(encode(Publish(f"plant/{n}", b"v" * (k + 1), qos, packet_id=pid)))
            c.step = (MS // 10) if k % 2 else 200 * MS  # 0.1 ms or 200 ms: nothing between
            if qos == 1:
                c.send(encode(PubAck(pid)), False)
            else:
                c.send(encode(PubRec(pid)), False)
                c.step = MS
                c.send(encode(PubRel(pid)))
                c.send(encode(PubComp(pid)), False)
            pid += 1
        c.step = MS
        c.send(encode(Disconnect()))
        convs.append(c.close())
    frames = sorted((f for c in convs for f in c.frames()), key=lambda f: f[0])
    path.write_bytes(pcap(frames))


@pytest.fixture(scope="module")
def pages_table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pages")
    _pages_capture(tmp / "pages.pcap")
    ingest(spark, [str(tmp / "pages.pcap")], str(tmp / "table"))
    return tmp / "table"


def _chromium(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        return subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}", *args, url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def _png_pixels(data: bytes, max_rows: int) -> tuple[int, int, list[bytes]]:
    """(width, height, first `max_rows` rows of RGB bytes) of an 8-bit RGB or RGBA PNG, non-interlaced (what
    Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0
    channels = 4 if colour == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(min(height, max_rows)):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        prev = line
        rows.append(bytes(v for n, v in enumerate(line) if channels == 3 or n % 4 != 3))
    return width, height, rows


def _colour_count(rows: list[bytes], hex_colour: str) -> int:
    rgb = bytes.fromhex(hex_colour.lstrip("#"))
    return sum(sum(1 for x in range(0, len(row), 3) if row[x : x + 3] == rgb) for row in rows)


@pytest.mark.slow
@pytest.mark.interop
def test_the_html_report_in_chromium(spark: Any, pages_table: Path) -> None:
    report = build_report(spark, str(pages_table))
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTEFACTS / "report.html"
    page.write_text(report_html(report), encoding="utf-8")
    shot = ARTEFACTS / "report.png"
    shot.unlink(missing_ok=True)
    made = _chromium(page.as_uri(), f"--screenshot={shot}", "--window-size=1280,2400")
    assert shot.is_file(), made.stderr[-2000:]
    print(f"screenshot of the HTML report: {shot}")
    dom = _chromium(page.as_uri(), "--dump-dom").stdout
    assert "<svg" in dom

    # Legends: each swatch comes just before its own label, in one item; no two lines share a colour.
    items = re.findall(
        r'<span class="item"><span class="swatch( dashed)?" style="background:\s*(#[0-9a-f]{6}|rgb\([^)]*\))[^"]*">'
        r'</span><span class="label">([^<]*)</span></span>',
        dom,
    )
    names = [name for _, _, name in items]
    # The five busiest topics, then the five busiest clients, each the busiest first.
    busiest = [f"topic plant/{n}" for n in range(5, 0, -1)] + [f"client pub{n}" for n in range(5, 0, -1)]
    assert names == ["all messages", *busiest], names
    assert [dashed for dashed, _, _ in items] == [""] * 6 + [" dashed"] * 5
    colours = [colour for _, colour, _ in items]
    assert len(set(colours)) == len(colours), colours
    lines = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})"', dom)
    assert len(lines) == len(items) and len(set(lines)) == len(lines)

    # Axes: several time ticks in order; counts only at whole numbers; the histograms' bins contiguous.
    xticks = [re.findall(r'class="xtick"[^>]*>([^<]*)<', svg) for svg in re.findall(r"<svg.*?</svg>", dom)]
    times = xticks[0]
    assert len(times) >= 4 and all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in times), times
    assert times == sorted(times)
    yticks = re.findall(r'class="ytick"[^>]*>([^<]*)<', dom)
    assert yticks and all(re.fullmatch(r"[\d,]+", t) for t in yticks), yticks
    histograms = [svg for svg in re.findall(r"<svg.*?</svg>", dom) if 'class="bin"' in svg]
    assert len(histograms) == len(report["latency_histogram"]) == 2
    qos1 = [int(c) for c in re.findall(r'data-count="(\d+)"', histograms[0])]
    bins = report["latency_histogram"]["qos1_puback"]
    assert sum(qos1) == sum(b["count"] for b in bins) and 0 in qos1  # the empty bins between are drawn
    first, last = (round(4 * math.log10(b["from_ms"])) for b in (bins[0], bins[-1]))
    assert len(qos1) == last - first + 1

    # The latency table speaks as the terminal does.
    for label in LATENCY_LABELS.values():
        assert label in dom
    assert "qos1_puback" not in dom and "qos2_total" not in dom

    # The picture: every legend colour is painted (swatches are solid blocks of it) near the top of the page.
    width, height, rows = _png_pixels(shot.read_bytes(), 900)
    assert (width, height) == (1280, 2400)
    for colour in set(lines):
        assert _colour_count(rows, colour) >= 40, colour
