"""Shell completion: the checked-in scripts are what the app generates, and completing works."""

import shutil
import subprocess
from pathlib import Path

import pytest

from mqtt_cli.commands.completions import Shell, completion_script

from .conftest import REPO_ROOT, VENV_BIN, Run, cli_env

CHECKED_IN = {
    Shell.bash: REPO_ROOT / "completions" / "mqtt.bash",
    Shell.zsh: REPO_ROOT / "completions" / "_mqtt",
    Shell.fish: REPO_ROOT / "completions" / "mqtt.fish",
}


@pytest.mark.parametrize("shell", list(Shell))
def test_checked_in_script_is_what_the_app_generates(run: Run, mqtt_exe: Path, shell: Shell) -> None:
    result = run([mqtt_exe, "completions", shell.value])
    assert result.returncode == 0, result.stderr
    assert result.stdout == completion_script(shell) + "\n"
    path = CHECKED_IN[shell]
    stale = f"{path.relative_to(REPO_ROOT)} is stale: run `make completions`"
    assert path.read_text() == result.stdout, stale


@pytest.mark.parametrize("shell", list(Shell))
def test_script_calls_mqtt_back_through_its_complete_var(shell: Shell) -> None:
    script = completion_script(shell)
    assert f"_MQTT_COMPLETE=complete_{shell.value}" in script
    assert " mqtt" in script
    if shell is Shell.zsh:
        assert script.startswith("#compdef mqtt\n")  # what compinit looks for in $fpath


def complete(run: Run, shell: str, words: list[str], **env: str) -> list[str]:
    """Ask ``mqtt`` for completions the way the ``shell`` script does."""
    if shell == "bash":
        env |= {"COMP_WORDS": " ".join(words), "COMP_CWORD": str(len(words) - 1)}
    else:
        env["_TYPER_COMPLETE_ARGS"] = " ".join(words)
    result = run([VENV_BIN / "mqtt"], env=cli_env(_MQTT_COMPLETE=f"complete_{shell}", **env))
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_bash_protocol_completes_commands(run: Run) -> None:
    assert complete(run, "bash", ["mqtt", "comp"]) == ["completions"]


def test_bash_protocol_completes_options_and_arguments(run: Run) -> None:
    assert set(complete(run, "bash", ["mqtt", "--v"])) == {"--version"}
    assert complete(run, "bash", ["mqtt", "completions", ""]) == ["bash", "zsh", "fish"]
    assert complete(run, "bash", ["mqtt", "completions", "f"]) == ["fish"]


def test_zsh_protocol_completes_commands_with_help(run: Run) -> None:
    out = complete(run, "zsh", ["mqtt", "comp"])
    assert out == ['_arguments \'*: :(("completions":"Print a shell completion script."))\'']


def test_fish_protocol_completes_commands(run: Run) -> None:
    out = complete(run, "fish", ["mqtt", "completions", ""], _TYPER_COMPLETE_FISH_ACTION="get-args")
    assert out == ["bash", "zsh", "fish"]


def test_the_bash_script_completes_in_bash(tmp_path: Path) -> None:
    """Source completions/mqtt.bash in a real bash and call its function as bash's TAB would."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = f"""
        source {CHECKED_IN[Shell.bash]}
        complete -p mqtt
        COMP_WORDS=(mqtt comp); COMP_CWORD=1
        _mqtt_completion mqtt
        printf 'reply:%s\\n' "${{COMPREPLY[@]}}"
        COMP_WORDS=(mqtt completions z); COMP_CWORD=2
        _mqtt_completion mqtt
        printf 'reply:%s\\n' "${{COMPREPLY[@]}}"
    """
    env = cli_env(PATH=f"{VENV_BIN}:{cli_env()['PATH']}", HOME=str(tmp_path))
    result = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "complete -o default -F _mqtt_completion mqtt"
    assert lines[1:] == ["reply:completions", "reply:zsh"]
