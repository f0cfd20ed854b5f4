"""docs/CONFORMANCE.md stays true to the tests: every test it names exists, and every statement a conformance
test is marked with (`@spec(v311=..., v5=...)`) has its row, naming that test. Runs without a broker."""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "CONFORMANCE.md"
HERE = Path(__file__).resolve().parent
VERSIONS = {"v311": "3.1.1", "v5": "5.0"}
ROW = re.compile(r"^\| (MQTT-[0-9.]+-\d+) \| (server|both|client) \| [^|]* \| ([^|]*) \| ([^|]*) \|$")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def marked_tests() -> dict[tuple[str, str], set[str]]:
    """(version, "MQTT-x.x.x-y") -> the conformance tests marked with it ("tests/conformance/f.py::name")."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == "spec":
                    for kw in deco.keywords:
                        for ident in ast.literal_eval(kw.value):
                            ref = f"tests/conformance/{path.name}::{node.name}"
                            found.setdefault((VERSIONS[kw.arg or ""], f"MQTT-{ident}"), set()).add(ref)
    return found


def doc_rows() -> dict[tuple[str, str], tuple[str, set[str], str]]:
    """(version, id) -> (binds, tests named, status) from the statement tables of docs/CONFORMANCE.md."""
    rows: dict[tuple[str, str], tuple[str, set[str], str]] = {}
    version = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## MQTT "):
            version = line.removeprefix("## MQTT ").split()[0]
        match = ROW.match(line)
        if match:
            key = (version, match[1])
            assert key not in rows, f"{key} has two rows"
            refs = {f"{p}::{n}" for p, n in TEST_REF.findall(match[3])}
            rows[key] = (match[2], refs, match[4].strip())
    return rows


@functools.cache
def _functions(path: str) -> frozenset[str]:
    file = ROOT / path
    if not file.exists():
        return frozenset()
    tree = ast.parse(file.read_text())
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def defined(ref: str) -> bool:
    path, name = ref.split("::")
    return name in _functions(path)


def test_every_test_named_in_the_doc_exists() -> None:
    refs = set().union(*(tests for _, tests, _ in doc_rows().values()))
    refs |= {f"{p}::{n}" for p, n in TEST_REF.findall(DOC.read_text())}
    missing = sorted(ref for ref in refs if not defined(ref))
    assert not missing, f"docs/CONFORMANCE.md names tests that do not exist: {missing}"


def test_every_marked_statement_has_its_row_naming_the_test() -> None:
    rows = doc_rows()
    problems = []
    for key, tests in sorted(marked_tests().items()):
        if key not in rows:
            problems.append(f"{key} has no row")
            continue
        for ref in sorted(tests - rows[key][1]):
            problems.append(f"{key}: its row does not name {ref}")
    assert not problems, "\n".join(problems)


def test_rows_have_a_test_or_a_reason() -> None:
    for key, (binds, tests, status) in doc_rows().items():
        if status in ("tested", "fails today"):
            assert tests, f"{key} is '{status}' without a test"
        elif binds != "client":
            assert status.startswith(("not testable:", "not tested:")), f"{key}: status '{status}'"


def test_summary_counts_match_the_tables() -> None:
    """The summary table's figures are the tables' own."""
    rows = doc_rows()
    text = DOC.read_text()
    for version in VERSIONS.values():
        server = [r for (v, _), r in rows.items() if v == version and r[0] != "client"]
        counts = Counter(status.split(":")[0] for _, _, status in server)
        line = (
            f"| {version} | {len(server)} | {counts['tested']} | {counts['fails today']} | "
            f"{counts['not testable']} | {counts['not tested']} |"
        )
        assert line in text, f"summary line for {version} should read: {line}"


def test_statement_ids_in_test_names_are_statements() -> None:
    """Anywhere in tests/, a name carrying `MQTT_x_y_z_n` names a statement that exists in 3.1.1 or 5.0, and
    no name carries a cut-short id such as `MQTT_4_13_1`."""
    known = {ident for _, ident in doc_rows()}
    problems = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "MQTT_" in node.name:
                for token in re.findall(r"MQTT((?:_\d+)+)", node.name):
                    parts = token.strip("_").split("_")
                    ident = f"MQTT-{'.'.join(parts[:-1])}-{parts[-1]}" if len(parts) == 4 else None
                    if ident not in known:
                        problems.append(f"{path.relative_to(ROOT)}::{node.name}: MQTT{token}")
    assert not problems, "test names with statement ids that do not exist:\n" + "\n".join(problems)
