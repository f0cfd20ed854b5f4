"""The data side of `mqtt bench`: histogram buckets and exact merge, figures, --expect (loss/duplicate/reorder
counting: test_benchwire.py)."""

import random

import pytest

from mqtt_cli.core.benchstats import (
    HEADER_SIZE,
    Figures,
    Histogram,
    bucket_of,
    bucket_range,
    expand_topic,
    make_payload,
    merged,
    parse_expect,
    read_payload,
    subscription_filter,
    summary,
)


def test_buckets_cover_every_value_once_and_are_narrow() -> None:
    previous_high = -1
    for index in range(bucket_of(10_000_000) + 1):
        low, high = bucket_range(index)
        assert low == previous_high + 1  # contiguous, no gap, no overlap
        assert bucket_of(low) == index and bucket_of(high) == index
        assert high - low + 1 <= max(1, low // 64)  # at most 1/64 of the value wide
        previous_high = high
    assert [bucket_of(v) for v in range(128)] == list(range(128))  # exact below 128 us


def test_merge_is_exact() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(7, 2)) for _ in range(20_000)]
    whole, a, b = Histogram(), Histogram(), Histogram()
    for i, v in enumerate(values):
        whole.record(v)
        (a if i % 3 else b).record(v)
    a.merge(b)
    assert a == whole
    for p in (50, 90, 99, 99.9, 100):
        assert a.percentile(p) == whole.percentile(p)
    exact = sorted(values)
    for p in (50, 90, 99):
        true = exact[max(0, -(-len(exact) * p // 100) - 1)]
        got = whole.percentile(p)
        assert got is not None and true <= got <= true + max(1, true // 64)  # the bucket's highest value
    assert whole.percentile(100) == max(values) == whole.max_us


def test_figures_merge_and_summary() -> None:
    a, b = Figures(sent=10, subscribers=1, distinct=8, delivered=9, dups=1), Figures(sent=5, subscribers=1, distinct=10)
    a.latency.record(100)
    b.latency.record(300)
    a.first_connect_ns, b.first_connect_ns = 5, 3
    m = merged([a, b])
    s = summary(m, 0)
    assert (s["sent"], s["expected"], s["lost"], s["dups"], s["samples"]) == (15, 30, 12, 1, 2)
    assert m.first_connect_ns == 3 and s["max_us"] == 300 and s["p50_us"] == 100


def test_payload_layout() -> None:
    p = make_payload(64, 123456789, 7, 42)
    assert len(p) == 64 and p[HEADER_SIZE:] == b"." * 44
    assert read_payload(p) == (123456789, 7, 42)
    assert len(make_payload(0, 1, 1, 1)) == HEADER_SIZE
    assert read_payload(b"short") is None


def test_expect_parsing() -> None:
    known = summary(Figures(), None).keys()
    c = parse_expect("loss=0, p99<5ms,delivered_per_s>=1000", known)
    assert [(x.key, x.op, x.value) for x in c] == [
        ("lost", "=", 0),
        ("p99_us", "<", 5000),
        ("delivered_per_s", ">=", 1000),
    ]
    assert c[1].check({"p99_us": 4999}) and not c[1].check({"p99_us": 5000}) and not c[1].check({"p99_us": None})
    pct = parse_expect("loss<1%", known)[0]
    assert pct.check({"lost": 9, "expected": 1000}) and not pct.check({"lost": 10, "expected": 1000})
    for bad in ("nonsense", "p99<5%", "lost<3ms", "foo=1", ""):
        with pytest.raises(ValueError):
            parse_expect(bad, known)


def test_topics() -> None:
    assert expand_topic("bench/%i/%c/%u", 3, "id3", "joe") == "bench/3/id3/joe"
    assert subscription_filter("bench/%i/x/c%c") == "bench/+/x/+"
