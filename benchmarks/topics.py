"""Benchmark the MQTT topic engine (mqtt_cli.core.topics.TopicTrie).

Builds 100,000 subscriptions shaped like a fleet deployment and measures
match() latency per topic class (with and without the match cache), the add
rate and the remove rate.

    python benchmarks/topics.py [--subs N] [--samples N] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from mqtt_cli.core.topics import TopicTrie, topic_filter_error, topic_name_error
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from mqtt_cli.core.topics import TopicTrie, topic_filter_error, topic_name_error

SITES = 100
DEVICES = 800


def build_subscriptions(total: int) -> list[tuple[str, str, int]]:
    """(filter, key, qos) triples of a realistic shape, ``total`` of them.

    Scaled for total=100,000; other totals shrink/grow the exact-device part.
    """
    subs: list[tuple[str, str, int]] = []
    # Few subscribers per filter, many levels of wildcards:
    for i in range(SITES):
        subs += [(f"site/{i}/#", f"site-{i}-{k}", 1) for k in range(3)]
        subs += [(f"+/{i}/device/+/alarm", f"alarm-{i}-{k}", 1) for k in range(40)]
        subs += [(f"$share/fleet/site/{i}/device/+/telemetry", f"w-{i}-{m}", 0) for m in range(46)]
    # One hot filter with many subscribers (every alarm goes to 1000 clients).
    subs += [("site/+/device/+/alarm", f"ops-{k}", 2) for k in range(1000)]
    subs += [("#", f"mon-{k}", 0) for k in range(2)]
    subs += [("$SYS/#", f"sys-{k}", 0) for k in range(10)]
    # Exact topics: one status subscriber for the first 100 devices per site.
    subs += [(f"site/{i}/device/{j}/status", f"dash-{i}-{j}", 1) for i in range(SITES) for j in range(100)]
    # The bulk: every device listens to its own command subtree.
    remaining = total - len(subs)
    per_site = max(1, remaining // SITES)
    dev = [(f"site/{i}/device/{j}/+", f"dev-{i}-{j}", 1) for j in range(per_site) for i in range(SITES)]
    subs += dev[:remaining]
    # Pad any remainder with plain exact topics.
    subs += [(f"cmd/{n}", f"cmd-{n}", 0) for n in range(total - len(subs))]
    return subs[:total]


def topic_classes(rng: random.Random, samples: int) -> dict[str, list[str]]:
    def dev_topics(leaf: str, jmax: int) -> list[str]:
        return [f"site/{rng.randrange(SITES)}/device/{rng.randrange(jmax)}/{leaf}" for _ in range(samples)]

    return {
        "few (temp)": dev_topics("temp", DEVICES),
        "exact (status)": dev_topics("status", 100),
        "shared (telemetry)": dev_topics("telemetry", DEVICES),
        "many (alarm)": dev_topics("alarm", DEVICES),
        "miss": [f"nosuch/{rng.randrange(10**6)}/x" for _ in range(samples)],
        "$SYS": [f"$SYS/broker/clients/{rng.randrange(1000)}" for _ in range(samples)],
    }


def _timer_overhead_ns() -> float:
    clock = time.perf_counter_ns
    deltas = []
    for _ in range(10_000):
        t0 = clock()
        t1 = clock()
        deltas.append(t1 - t0)
    return statistics.median(deltas)


def time_calls(fn: Callable[[str], object], topics: list[str], overhead_ns: float) -> dict[str, float]:
    """Per-call latency (timer overhead subtracted) and the batch mean, in µs."""
    clock = time.perf_counter_ns
    per_call: list[int] = []
    for topic in topics:
        t0 = clock()
        fn(topic)
        per_call.append(clock() - t0)
    t0 = clock()
    for topic in topics:
        fn(topic)
    mean = (clock() - t0) / len(topics) / 1000
    per_call.sort()
    p99 = per_call[min(len(per_call) - 1, int(len(per_call) * 0.99))]
    return {
        "median_us": max(0.0, (statistics.median(per_call) - overhead_ns) / 1000),
        "p99_us": max(0.0, (p99 - overhead_ns) / 1000),
        "mean_us": mean,
    }


def run(total: int, samples: int) -> dict[str, object]:
    rng = random.Random(1883)
    subs = build_subscriptions(total)
    rng.shuffle(subs)
    overhead = _timer_overhead_ns()
    results: dict[str, object] = {"subscriptions": len(subs), "timer_overhead_ns": overhead}

    gc.collect()
    gc.disable()  # keep collector pauses out of the latency numbers
    try:
        trie: TopicTrie[Any, int] = TopicTrie()
        t0 = time.perf_counter()
        for flt, key, qos in subs:
            trie.add(flt, key, qos)
        add_s = time.perf_counter() - t0
        results["add_per_s"] = len(subs) / add_s
        results["nodes"] = trie._node_count()

        cached: TopicTrie[Any, int] = TopicTrie(cache_size=10_000)
        for flt, key, qos in subs:
            cached.add(flt, key, qos)

        classes = topic_classes(rng, samples)
        rows = []
        for name, topics in classes.items():
            counts = [len(trie.match(t)) for t in topics]
            plain = time_calls(trie.match, topics, overhead)
            cached._cache.clear()
            # Per-call figures come from the first pass: (mostly) cache misses.
            cold = time_calls(cached.match, topics, overhead)
            del cold["mean_us"]  # the batch pass after the first one only hits
            cached._cache.clear()
            for t in topics:  # warm
                cached.match(t)
            hot = time_calls(cached.match, topics, overhead)
            rows.append(
                {
                    "class": name,
                    "matches": statistics.median(counts),
                    "uncached": plain,
                    "cache_miss": cold,
                    "cache_hot": hot,
                }
            )
        results["match"] = rows

        # Validation, the codec's hot path.
        names = classes["few (temp)"]
        results["topic_name_error_us"] = time_calls(topic_name_error, names, overhead)["mean_us"]
        flts = [s[0] for s in subs[:samples]]
        results["topic_filter_error_us"] = time_calls(topic_filter_error, flts, overhead)["mean_us"]

        # Memory of the index itself (the subscription strings are shared
        # with the caller's list, so they are not counted).
        del cached
        gc.collect()
        tracemalloc.start()
        probe: TopicTrie[Any, int] = TopicTrie()
        for flt, key, qos in subs:
            probe.add(flt, key, qos)
        results["bytes_per_subscription"] = tracemalloc.get_traced_memory()[0] / len(subs)
        tracemalloc.stop()
        del probe

        order = list(subs)
        rng.shuffle(order)
        t0 = time.perf_counter()
        for flt, key, _ in order:
            trie.remove(flt, key)
        remove_s = time.perf_counter() - t0
        results["remove_per_s"] = len(subs) / remove_s
        results["nodes_after_remove"] = trie._node_count()
    finally:
        gc.enable()
    return results


def print_table(r: dict[str, object]) -> None:
    print(
        f"{r['subscriptions']:,} subscriptions, {r['nodes']:,} trie nodes "
        f"(timer overhead {r['timer_overhead_ns']:.0f} ns subtracted)"
    )
    print(f"add:    {r['add_per_s']:>12,.0f} /s   (~{r['bytes_per_subscription']:.0f} bytes/subscription)")
    print(f"remove: {r['remove_per_s']:>12,.0f} /s   (nodes left: {r['nodes_after_remove']})")
    print(f"topic_name_error:   {r['topic_name_error_us']:.3f} µs/call")
    print(f"topic_filter_error: {r['topic_filter_error_us']:.3f} µs/call")
    print()
    head = (
        f"{'match() µs':<20}{'hits':>6}  {'uncached med/p99/mean':>23}"
        f"  {'cache miss med/p99':>18}  {'cache hot med/p99':>18}"
    )
    print(head)
    print("-" * len(head))
    rows = r["match"]
    assert isinstance(rows, list)
    for row in rows:
        u, c, h = row["uncached"], row["cache_miss"], row["cache_hot"]
        print(
            f"{row['class']:<20}{row['matches']:>6.0f}  "
            f"{u['median_us']:>7.2f} {u['p99_us']:>7.2f} {u['mean_us']:>7.2f}  "
            f"{c['median_us']:>9.2f} {c['p99_us']:>8.2f}  "
            f"{h['median_us']:>8.2f} {h['p99_us']:>8.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subs", type=int, default=100_000, help="number of subscriptions")
    parser.add_argument("--samples", type=int, default=2_000, help="topics per class")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--quick", action="store_true", help="2,000 subscriptions, 100 topics per class")
    args = parser.parse_args(argv)
    if args.quick:
        args.subs, args.samples = 2_000, 100
    results = run(args.subs, args.samples)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
