#!/usr/bin/env python3
# ruff: noqa  (copied verbatim from the sample-capture corpus: its comparison script)
"""Compare an `mqtt dump` JSON-lines output with the tshark oracle.

    compare_dump.py ORACLE.jsonl[.gz] CANDIDATE.jsonl[.gz] [--examples N]
                    [--json REPORT.json] [--quiet]

The candidate format is described in CANDIDATE-FORMAT.md.  Packets are
matched per direction of each TCP connection (src -> dst), in order, with a
small look-ahead to re-synchronise after a missing or extra packet; then every
field is compared.  A matched packet passes when every compared field agrees.
Oracle packets the candidate lacks and candidate packets the oracle lacks
count as failed; candidate records of type MALFORMED that match nothing are
listed but not counted (tshark could not decode those bytes either).

The last line printed is 'N passed, M failed'.  Exit status: 0 when M == 0,
1 otherwise, 2 on unusable input.
"""

import argparse
import gzip
import json
import sys
from collections import OrderedDict, defaultdict
from decimal import Decimal, InvalidOperation

TYPES = [
    "RESERVED",
    "CONNECT",
    "CONNACK",
    "PUBLISH",
    "PUBACK",
    "PUBREC",
    "PUBREL",
    "PUBCOMP",
    "SUBSCRIBE",
    "SUBACK",
    "UNSUBSCRIBE",
    "UNSUBACK",
    "PINGREQ",
    "PINGRESP",
    "DISCONNECT",
    "AUTH",
]
TYPE_ALIASES = {
    "CONNECTACK": "CONNACK",
    "PING": "PINGREQ",
    "PINGREQUEST": "PINGREQ",
    "PINGRESPONSE": "PINGRESP",
    "UNSUB": "UNSUBSCRIBE",
    "SUB": "SUBSCRIBE",
    "DISCONN": "DISCONNECT",
    "RESERVED0": "RESERVED",
}

PROP_IDS = {
    0x01: "payload_format_indicator",
    0x02: "message_expiry_interval",
    0x03: "content_type",
    0x08: "response_topic",
    0x09: "correlation_data",
    0x0B: "subscription_identifier",
    0x11: "session_expiry_interval",
    0x12: "assigned_client_identifier",
    0x13: "server_keep_alive",
    0x15: "authentication_method",
    0x16: "authentication_data",
    0x17: "request_problem_information",
    0x18: "will_delay_interval",
    0x19: "request_response_information",
    0x1A: "response_information",
    0x1C: "server_reference",
    0x1F: "reason_string",
    0x21: "receive_maximum",
    0x22: "topic_alias_maximum",
    0x23: "topic_alias",
    0x24: "maximum_qos",
    0x25: "retain_available",
    0x26: "user_property",
    0x27: "maximum_packet_size",
    0x28: "wildcard_subscription_available",
    0x29: "subscription_identifier_available",
    0x2A: "shared_subscription_available",
}
PROP_NAME_ALIASES = {
    "publication_expiry_interval": "message_expiry_interval",
    "message_expiry": "message_expiry_interval",
    "subscription_identifiers": "subscription_identifier",
    "user_properties": "user_property",
    "assigned_client_id": "assigned_client_identifier",
    "maximum_qos_level": "maximum_qos",
    "max_qos": "maximum_qos",
    "server_keepalive": "server_keep_alive",
}
BINARY_PROPS = {"correlation_data", "authentication_data"}

# --- which fields are compared -------------------------------------------
# Core fields: always compared where they apply to the oracle packet's type.
CORE = [
    "ts",
    "src",
    "dst",
    "type",
    "qos",
    "retain",
    "dup",
    "packet_id",
    "topic",
    "topics",
    "payload_len",
    "client_id",
    "reason_code",
    "reason_codes",
]
# Optional fields: compared only when the candidate record gives a non-null
# value (and the oracle has a value for it).
OPTIONAL = [
    "properties",
    "will_properties",
    "flags",
    "remaining_length",
    "proto_name",
    "proto_version",
    "clean_session",
    "keepalive",
    "username",
    "will_topic",
    "will_qos",
    "will_retain",
    "will_payload_len",
    "session_present",
    "sub_options",
    "payload_sha256",
    "frame",
]

PUBLISH_ONLY = {"qos", "retain", "dup", "topic", "payload_len"}
IMPLIED_ZERO_RC = {"PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "DISCONNECT", "AUTH"}
PACKET_ID_TYPES = {"PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK"}
TS_TOLERANCE = Decimal("0.0000015")
LOOKAHEAD = 64


class BadInput(Exception):
    pass


# --------------------------------------------------------------------------
def load(path, role):
    recs, errors = [], []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                errors.append("%s line %d: not JSON (%s)" % (role, n, e))
                continue
            if not isinstance(obj, dict):
                errors.append("%s line %d: not a JSON object" % (role, n))
                continue
            obj["_line"] = n
            recs.append(obj)
    return recs, errors


def norm_type(t):
    if t is None:
        return None
    if isinstance(t, int):
        return TYPES[t] if 0 <= t < 16 else str(t)
    s = str(t).strip().upper().replace("-", "").replace("_", "").replace(" ", "")
    if s in TYPES:
        return s
    if s in TYPE_ALIASES:
        return TYPE_ALIASES[s]
    if s in ("MALFORMED", "ERROR", "INVALID", "UNKNOWN", "UNDECODABLE"):
        return "MALFORMED"
    return str(t).upper()


def norm_addr(a):
    if a is None:
        return None
    s = str(a).strip()
    if s.startswith("[") and "]:" in s:  # [::1]:1883
        host, port = s[1:].split("]:", 1)
        return "%s:%s" % (host.lower(), int(port))
    if s.count(":") == 1:
        host, port = s.split(":")
        try:
            return "%s:%d" % (host, int(port))
        except ValueError:
            return s
    return s


def to_decimal(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        return Decimal(str(v))
    except (InvalidOperation, ValueError):
        return None


def norm_prop_name(k):
    if isinstance(k, int):
        return PROP_IDS.get(k, "unknown_0x%02x" % k)
    s = str(k).strip()
    if s.lower().startswith("0x"):
        try:
            return PROP_IDS.get(int(s, 16), "unknown_0x%02x" % int(s, 16))
        except ValueError:
            pass
    if s.isdigit():
        return PROP_IDS.get(int(s), "unknown_0x%02x" % int(s))
    s = s.lower().replace("-", "_").replace(" ", "_")
    return PROP_NAME_ALIASES.get(s, s)


def norm_prop_value(name, v):
    if name == "user_property":
        if isinstance(v, dict):
            if "key" in v:
                return (str(v.get("key")), str(v.get("value")))
            if "name" in v:
                return (str(v.get("name")), str(v.get("value")))
            if len(v) == 1:
                ((k, val),) = v.items()
                return (str(k), str(val))
        if isinstance(v, (list, tuple)) and len(v) == 2:
            return (str(v[0]), str(v[1]))
        return ("?", json.dumps(v, sort_keys=True))
    if name in BINARY_PROPS:
        if isinstance(v, dict) and "hex" in v:
            v = v["hex"]
        if isinstance(v, (bytes, bytearray)):
            return v.hex()
        return str(v).lower().replace(" ", "").replace(":", "")
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def norm_props(p):
    """-> sorted list of (name, value) or None when not given."""
    if p is None:
        return None
    items = []
    if isinstance(p, dict):
        for k, v in p.items():
            name = norm_prop_name(k)
            if name == "user_property":
                if isinstance(v, dict) and "key" not in v and "name" not in v:
                    for kk, vv in v.items():
                        if isinstance(vv, list):
                            items += [(name, (str(kk), str(x))) for x in vv]
                        else:
                            items.append((name, (str(kk), str(vv))))
                elif isinstance(v, list) and v and isinstance(v[0], (list, tuple, dict)):
                    items += [(name, norm_prop_value(name, x)) for x in v]
                else:
                    items.append((name, norm_prop_value(name, v)))
            elif name == "subscription_identifier" and isinstance(v, list):
                items += [(name, x) for x in v]
            else:
                items.append((name, norm_prop_value(name, v)))
    elif isinstance(p, list):
        for e in p:
            if isinstance(e, dict):
                name = norm_prop_name(e.get("name", e.get("id", e.get("property"))))
                if name == "user_property" and "key" in e:
                    val = (str(e["key"]), str(e.get("value")))
                else:
                    val = norm_prop_value(name, e.get("value"))
            elif isinstance(e, (list, tuple)) and len(e) == 3 and norm_prop_name(e[0]) == "user_property":
                name, val = "user_property", (str(e[1]), str(e[2]))
            elif isinstance(e, (list, tuple)) and len(e) == 2:
                name = norm_prop_name(e[0])
                val = norm_prop_value(name, e[1])
            else:
                name, val = "?", json.dumps(e)
            items.append((name, val))
    else:
        return [("?", json.dumps(p))]
    return sorted(items, key=lambda x: json.dumps(x, sort_keys=True, default=str))


def as_int(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s, 16) if s.lower().startswith("0x") else int(s)
        except ValueError:
            return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def as_bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "set"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("false", "0", "no", "not set"):
        return False
    return v


BOOL_FIELDS = {"retain", "dup", "clean_session", "will_retain", "session_present"}
INT_FIELDS = {
    "qos",
    "packet_id",
    "payload_len",
    "reason_code",
    "flags",
    "remaining_length",
    "proto_version",
    "keepalive",
    "will_qos",
    "will_payload_len",
    "frame",
}


def norm_value(field, v):
    if v is None:
        return None
    if field in BOOL_FIELDS:
        return as_bool(v)
    if field in INT_FIELDS:
        return as_int(v)
    if field in ("reason_codes", "sub_options"):
        if isinstance(v, list):
            return [as_int(x) for x in v]
        return [as_int(v)]
    if field == "topics":
        if isinstance(v, list):
            out = []
            for x in v:
                if isinstance(x, dict):
                    x = x.get("topic", x.get("filter"))
                elif isinstance(x, (list, tuple)) and x:
                    x = x[0]
                out.append(x)
            return out
        return [v]
    if field == "payload_sha256":
        return str(v).lower()
    return v


# --------------------------------------------------------------------------
def applicable(field, otype):
    if field in PUBLISH_ONLY:
        return otype == "PUBLISH"
    if field == "topics":
        return otype in ("SUBSCRIBE", "UNSUBSCRIBE")
    if field == "client_id":
        return otype == "CONNECT"
    if field == "reason_codes":
        return otype in ("SUBACK", "UNSUBACK")
    return True


def compare_field(field, o, c, otype):
    """-> None (not compared) / True / False"""
    if field == "type":
        return norm_type(c.get("type")) == o["type"]
    if field in ("src", "dst"):
        return norm_addr(c.get(field)) == o[field]
    if field == "ts":
        ov, cv = to_decimal(o.get("ts")), to_decimal(c.get("ts"))
        if ov is None:
            return None
        return cv is not None and abs(ov - cv) <= TS_TOLERANCE
    if not applicable(field, otype):
        return None
    ov = norm_value(field, o.get(field))
    in_cand = field in c
    cv = norm_value(field, c.get(field))
    if field in OPTIONAL:
        if not in_cand or c.get(field) is None:
            return None
        if field in ("properties", "will_properties"):
            op = norm_props(o.get(field)) or []
            cp = norm_props(c.get(field)) or []
            return op == cp
        if ov is None:
            return None
        return ov == cv
    # core fields
    if field == "packet_id":
        if ov is None and cv is None:
            return None
        return ov == cv
    if field == "reason_code":
        if otype in IMPLIED_ZERO_RC:
            ov = 0 if ov is None else ov
            cv = 0 if cv is None else cv
        if ov is None and cv is None:
            return None
        return ov == cv
    if field == "reason_codes":
        ov = ov or []
        cv = cv or []
        return ov == cv
    if field == "topic":
        return ov == cv
    if ov is None and cv is None:
        return None
    return ov == cv


# --------------------------------------------------------------------------
def match_key(r):
    """Cheap identity of a packet used to pair records: type, packet id,
    topic, payload length and timestamp (to the microsecond)."""
    t = norm_type(r.get("type"))
    ts = to_decimal(r.get("ts"))
    pub = t == "PUBLISH"
    return (
        t,
        as_int(r.get("packet_id")),
        r.get("topic") if pub else None,
        as_int(r.get("payload_len")) if pub else None,
        int((ts * 1000000).to_integral_value()) if ts is not None else None,
        str(r.get("payload_sha256")).lower() if pub and r.get("payload_sha256") else None,
    )


def same(ka, kb):
    if ka[:5] != kb[:5]:
        return False
    return ka[5] is None or kb[5] is None or ka[5] == kb[5]


def align(A, B):
    """Align two lists of records of one direction (oracle A, candidate B).
    Returns (pairs, missing indices in A, extra indices in B).

    Walks both lists in order.  Where the records at the heads do not have the
    same identity (type, packet id, topic, payload length, timestamp), it looks
    ahead up to LOOKAHEAD records on either side for a point where two
    consecutive records agree again, and counts what it skipped as missing or
    extra; failing that, the two heads are paired (same packet, decoded
    differently)."""
    pairs, missing, extra = [], [], []
    ka = [match_key(a) for a in A]
    kb = [match_key(b) for b in B]
    i = j = 0
    fruitless = 0
    while i < len(A) and j < len(B):
        if same(ka[i], kb[j]):
            pairs.append((i, j))
            i += 1
            j += 1
            fruitless = 0
            continue
        found = None
        if fruitless < 32:  # a candidate that is wrong everywhere: stop searching
            for d in range(1, LOOKAHEAD):
                if (
                    i + d < len(A)
                    and same(ka[i + d], kb[j])
                    and (i + d + 1 >= len(A) or j + 1 >= len(B) or same(ka[i + d + 1], kb[j + 1]))
                ):
                    found = ("A", d)
                    break
                if (
                    j + d < len(B)
                    and same(ka[i], kb[j + d])
                    and (i + 1 >= len(A) or j + d + 1 >= len(B) or same(ka[i + 1], kb[j + d + 1]))
                ):
                    found = ("B", d)
                    break
        if found is None:
            fruitless += 1
            pairs.append((i, j))
            i += 1
            j += 1
        elif found[0] == "A":
            missing.extend(range(i, i + found[1]))
            i += found[1]
        else:
            extra.extend(range(j, j + found[1]))
            j += found[1]
    missing.extend(range(i, len(A)))
    extra.extend(range(j, len(B)))
    return pairs, missing, extra


def short(v, n=80):
    s = json.dumps(v, ensure_ascii=False, default=str)
    return s if len(s) <= n else s[: n - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description="Compare mqtt dump output with the tshark oracle")
    ap.add_argument("oracle")
    ap.add_argument("candidate")
    ap.add_argument("--examples", type=int, default=3, help="disagreement examples per field")
    ap.add_argument("--json", help="write a machine-readable report here")
    ap.add_argument("--quiet", action="store_true", help="print only the closing line")
    args = ap.parse_args()

    try:
        oracle, oerr = load(args.oracle, "oracle")
    except OSError as e:
        print("cannot read oracle: %s" % e, file=sys.stderr)
        return 2
    if oerr:
        print("\n".join(oerr), file=sys.stderr)
        return 2
    try:
        cand, cerr = load(args.candidate, "candidate")
    except OSError as e:
        print("cannot read candidate: %s" % e, file=sys.stderr)
        print("0 passed, %d failed" % len(oracle))
        return 1

    for o in oracle:
        o["type"] = norm_type(o["type"])
    malformed = [c for c in cand if norm_type(c.get("type")) == "MALFORMED"]
    cand = [c for c in cand if norm_type(c.get("type")) != "MALFORMED"]

    # group by direction, keeping global order
    oflows, cflows = OrderedDict(), OrderedDict()
    for idx, o in enumerate(oracle):
        oflows.setdefault((o["src"], o["dst"]), []).append(idx)
    for idx, c in enumerate(cand):
        cflows.setdefault((norm_addr(c.get("src")), norm_addr(c.get("dst"))), []).append(idx)

    pairs, missing, extra = [], [], []
    for key, oidx in oflows.items():
        cidx = cflows.get(key, [])
        p, m, e = align([oracle[i] for i in oidx], [cand[j] for j in cidx])
        pairs += [(oidx[a], cidx[b]) for a, b in p]
        missing += [oidx[a] for a in m]
        extra += [cidx[b] for b in e]
    for key, cidx in cflows.items():
        if key not in oflows:
            extra += cidx
    pairs.sort()

    fields = CORE + OPTIONAL
    stats = {f: [0, 0] for f in fields}  # compared, agreed
    examples = defaultdict(list)
    passed = failed_mismatch = 0
    failed_packets = []
    for oi, ci in pairs:
        o, c = oracle[oi], cand[ci]
        ok = True
        bad = []
        for f in CORE + [f for f in OPTIONAL if c.get(f) is not None]:
            r = compare_field(f, o, c, o["type"])
            if r is None:
                continue
            stats[f][0] += 1
            if r:
                stats[f][1] += 1
            else:
                ok = False
                bad.append(f)
                if len(examples[f]) < args.examples:
                    examples[f].append((o.get("frame"), o["type"], o.get(f), c.get(f), c.get("_line")))
        if ok:
            passed += 1
        else:
            failed_mismatch += 1
            failed_packets.append(
                {"frame": o.get("frame"), "type": o["type"], "candidate_line": c.get("_line"), "fields": bad}
            )
    failed = failed_mismatch + len(missing) + len(extra) + len(cerr)

    # informational: global order
    order_breaks = 0
    last = -1
    for oi, ci in sorted(pairs, key=lambda p: p[1]):
        if oi < last:
            order_breaks += 1
        last = max(last, oi)

    if not args.quiet:
        print("oracle:    %s (%d MQTT packets)" % (args.oracle, len(oracle)))
        print(
            "candidate: %s (%d records, %d MALFORMED set aside%s)"
            % (
                args.candidate,
                len(cand) + len(malformed),
                len(malformed),
                ", %d unparsable lines" % len(cerr) if cerr else "",
            )
        )
        print(
            "matched %d, missing from candidate %d, extra in candidate %d, "
            "candidate records out of capture order %d" % (len(pairs), len(missing), len(extra), order_breaks)
        )
        if not pairs and cand:
            print('hint: no (src, dst) direction matched; addresses must look like "127.0.0.1:18841"')
        print()
        print("%-18s %9s %9s %9s" % ("field", "compared", "agree", "disagree"))
        for f in fields:
            n, a = stats[f]
            if n:
                print("%-18s %9d %9d %9d%s" % (f, n, a, n - a, "" if n == a else "   <--"))
        shown = [f for f in fields if examples[f]]
        if shown:
            print()
            print("disagreements (frame, type: oracle vs candidate [candidate line]):")
            for f in shown:
                for fr, t, ov, cv, line in examples[f]:
                    print("  %-16s frame %s %s: %s vs %s [line %s]" % (f, fr, t, short(ov), short(cv), line))
        if missing:
            print()
            print("missing (first %d):" % min(len(missing), args.examples * 3))
            for oi in missing[: args.examples * 3]:
                o = oracle[oi]
                print("  frame %s %s %s -> %s" % (o.get("frame"), o["type"], o["src"], o["dst"]))
        if extra:
            print()
            print("extra (first %d):" % min(len(extra), args.examples * 3))
            for ci in extra[: args.examples * 3]:
                c = cand[ci]
                print("  line %s %s %s -> %s" % (c.get("_line"), c.get("type"), c.get("src"), c.get("dst")))
        if malformed:
            print()
            print(
                "MALFORMED records set aside: %d (first: line %s %s)"
                % (len(malformed), malformed[0].get("_line"), short(malformed[0].get("error", "")))
            )
        for e in cerr[:5]:
            print(e)
        print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "oracle": args.oracle,
                    "candidate": args.candidate,
                    "oracle_packets": len(oracle),
                    "candidate_records": len(cand),
                    "malformed_set_aside": len(malformed),
                    "matched": len(pairs),
                    "missing": len(missing),
                    "extra": len(extra),
                    "unparsable_lines": len(cerr),
                    "fields": {f: {"compared": n, "agree": a} for f, (n, a) in stats.items() if n},
                    "failed_packets": failed_packets[:1000],
                    "passed": passed,
                    "failed": failed,
                },
                fh,
                indent=1,
            )
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
