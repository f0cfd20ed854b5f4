"""mqtt_cli.commands._coerce converts option values exactly as typer's pydantic adapters do, without them."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from hypothesis import given
from hypothesis import strategies as st
from typer._coercion import build_runtime_param, resolve_type_descriptor
from typer.models import OptionInfo

from mqtt_cli.app import COMMANDS, app
from mqtt_cli.commands._coerce import PlainRuntimeParam, plain_runtime_param

# Every kind of parameter the commands have (tests/commands/test_coerce.py::test_every_kind_is_covered).
KINDS: list[tuple[Any, dict[str, Any]]] = [
    (str, {}),
    (bool, {}),
    (int, {}),
    (int, {"min": 0, "max": 2}),
    (int, {"min": 0}),
    (int, {"min": 1}),
    (int, {"min": 0, "max": 1}),
    (int, {"min": 1, "max": 65535}),
    (int, {"min": 0, "max": 65535}),
    (int, {"min": 0, "max": 0xFFFFFFFF}),
    (int, {"min": 1, "max": 268435455}),
    (float, {}),
    (float, {"min": 0}),
    (float, {"min": 0.1}),
    (float, {"min": 0.001}),
    (float, {"min": 0.05}),
    (float, {"min": 0, "max": 1000}),
    (tuple[float, float], {}),
    (list[Path], {}),
    (list[str], {}),
    (list[int], {}),
    (Path, {}),
]

SAMPLES = [
    "", " ", "0", "1", "2", "3", "-1", "+1", "01", "007", "1_000", " 5", "5 ", "1.0", "1.5", ".5", "5.", "1e3",
    "-0", "-0.0", "0.05", "0.1", "0.0999", "65535", "65536", "4294967295", "4294967296", "268435455",
    "99999999999999999999", "inf", "nan", "true", "false", "yes", "abc", "x/y", "٣", "１", "\x00",
    "123456789012345678", "1234567890123456789",
]  # fmt: skip


def _outcome(runtime: Any, value: Any) -> tuple[str, Any]:
    try:
        result = runtime.coerce(value, param=_Param(), ctx=None)
    except Exception as exc:  # compared below
        return ("error", f"{type(exc).__name__}: {getattr(exc, 'message', exc)}")
    return ("value", (type(result).__name__, result if not isinstance(result, float) else repr(result)))


class _Param:
    """Enough of a click parameter for the coercion functions and their error messages."""

    multiple = False
    nargs = 1
    name = "x"
    opts = ("--x",)
    param_type_name = "option"
    human_readable_name = "--x"

    def get_error_hint(self, ctx: Any) -> str:
        return "'--x'"


def _pair(annotation: Any, constraints: dict[str, Any]) -> tuple[Any, PlainRuntimeParam]:
    descriptor = resolve_type_descriptor(annotation, OptionInfo(**constraints))
    return build_runtime_param(descriptor), plain_runtime_param(descriptor)


@pytest.mark.parametrize(("annotation", "constraints"), KINDS, ids=repr)
def test_plain_coercion_agrees_with_typers(annotation: Any, constraints: dict[str, Any]) -> None:
    theirs, ours = _pair(annotation, constraints)
    values: list[Any] = [None, *SAMPLES, 0, 1, 7, -3, 0.5, 2.0, True, False]
    if annotation in (list[str], list[int]):
        values = [None, (), *[(s,) for s in SAMPLES], ("1", "2"), ("1", "x"), ["3"]]
    for value in values:
        assert _outcome(ours, value) == _outcome(theirs, value), value


@given(st.one_of(st.text(max_size=25), st.from_regex(r"-?[0-9]{1,20}(\.[0-9]{0,17})?", fullmatch=True)))
def test_plain_numbers_agree_with_typers(text: str) -> None:
    for annotation, constraints in [(int, {}), (int, {"min": 0, "max": 2}), (float, {}), (float, {"min": 0.1})]:
        theirs, ours = _pair(annotation, constraints)
        assert _outcome(ours, text) == _outcome(theirs, text)


def test_every_kind_is_covered() -> None:
    group = typer.main.get_command(app)
    kinds = []
    for name in COMMANDS:
        command = group.commands[name]
        for sub in [command, *getattr(command, "commands", {}).values()]:
            for param in sub.params:
                desc = param.type_descriptor
                info = desc.parameter_info
                if isinstance(desc.annotation, type) and issubclass(desc.annotation, typer.core.Enum):
                    continue  # choices: typer's adapter converts them (only when given)
                kind = (desc.annotation, {k: v for k in ("min", "max") if (v := getattr(info, k)) is not None})
                kinds.append(kind)
                assert isinstance(param._runtime_param, PlainRuntimeParam) or param._runtime_param is None
    for kind in kinds:
        assert kind in KINDS, kind


def test_a_one_shot_client_command_does_not_import_pydantic(tmp_path: Path) -> None:
    # Nothing listens on this unix socket: pub fails to connect, after parsing every option.
    code = (
        "import sys\nfrom mqtt_cli.__main__ import main\n"
        "try:\n    main(['pub', '-t', 'x', '-m', 'y', '-q', '1', '--unix', sys.argv[1], '--connect-timeout', '1'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('mqtt_cli.commands.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "none.sock")], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]"
    assert "mqtt_cli.commands.sub" not in out[1] and "mqtt_cli.commands.serve" not in out[1]
