"""The Makefile's contract: its targets, and `make test` failing when pytest runs no test."""

import os
import re
import subprocess

from .conftest import REPO_ROOT


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # A clean make: not the jobserver or flags of the `make test` this may run under.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_make_help_lists_the_targets() -> None:
    result = make("help")
    assert result.returncode == 0, result.stderr
    targets = set(re.findall(r"^  make (\S+)", result.stdout, re.MULTILINE))
    assert {"install", "test", "serve", "zipapp", "completions", "lint", "bench", "bench-quick", "clean"} <= targets


def test_readme_names_every_step_of_make_test() -> None:
    """README's sentence on `make test` names each tool its lint step runs (ruff and mypy), then the suite."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    lint = makefile[makefile.index("\nlint:") :].split("\n\n")[0]
    tools = re.findall(r"\$\(BIN\)/(\w+)", lint)
    assert tools == ["ruff", "mypy"], lint
    readme = (REPO_ROOT / "README.md").read_text()
    sentence = re.search(r"`make test` runs ([^.]*)\.", readme)
    assert sentence is not None
    for tool in tools:
        assert tool in sentence.group(1), sentence.group(0)


def test_make_test_fails_when_no_test_is_collected() -> None:
    # -o: take install and lint as done, so that only the pytest step runs (selecting nothing, in one small file:
    # collecting the whole suite would take half a minute).
    result = make(
        "-o", "install", "-o", "lint", "test",
        "PYTEST_ARGS=tests/test_make.py -k no_test_has_this_name -p no:cacheprovider",
    )  # fmt: skip
    assert "no tests ran" in result.stdout  # pytest-xdist's summary when its workers run nothing
    assert "make test: pytest collected no tests" in result.stderr
    assert result.returncode != 0
