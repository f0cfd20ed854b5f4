"""Every file option of every command: a file that is missing, unreadable or a directory gives the same one
line (the option, the file and why) and the same exit code, the one docs/exit-codes.md gives.

An unreadable file needs a user that permissions apply to: as root the command runs without the capabilities
that let root read anything (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import MQTT, Mqtt

pytestmark = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv cannot be refused a file"
)


def run_limited(args: list[str], env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, MQTT, *args], input=stdin, capture_output=True, env=env, timeout=60)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("client.example")
    out = {"cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem", "ca": tmp_path / "ca.pem",
           "secret": tmp_path / "secret", "payload": tmp_path / "payload.bin"}  # fmt: skip
    cert.cert_chain_pems[0].write_to_path(str(out["cert"]))
    cert.private_key_pem.write_to_path(str(out["key"]))
    ca.cert_pem.write_to_path(str(out["ca"]))
    out["secret"].write_text("pw\n")
    out["payload"].write_bytes(b"x")
    locked = tmp_path / "locked"
    locked.mkdir()
    for name in list(out):
        copy = locked / out[name].name
        shutil.copy(out[name], copy)
        copy.chmod(0)
        out[f"locked-{name}"] = copy
    return out


# (command line with {missing}, {locked} or {dir} for the file under test; the file's key in `files`; exit code)
CASES = [
    (["pub", "-t", "a", "-m", "x", "--cafile", "{f}"], "ca", 2, "--cafile {f}"),
    (["pub", "-t", "a", "-m", "x", "--cert", "{f}", "--key", "KEY"], "cert", 2, "--cert {f}"),
    (["pub", "-t", "a", "-m", "x", "--cert", "CERT", "--key", "{f}"], "key", 2, "--key {f}"),
    (["sub", "-t", "a", "--cafile", "{f}"], "ca", 2, "--cafile {f}"),
    (["rr", "-t", "a", "-e", "b", "-m", "x", "--key", "{f}", "--cert", "CERT"], "key", 2, "--key {f}"),
    (["pub", "-t", "a", "-f", "{f}"], "payload", 2, "-f {f}"),
    (["rr", "-t", "a", "-e", "b", "-f", "{f}"], "payload", 2, "-f {f}"),
    (["pub", "-t", "a", "-m", "x", "-u", "u", "--password-file", "{f}"], "secret", 2, "--password-file {f}"),
    (
        [
            "bridge",
            "--local",
            "mqtt://127.0.0.1:1",
            "--remote",
            "mqtt://127.0.0.1:1",
            "--topic",
            "a/#",
            "--remote-cafile",
            "{f}",
        ],
        "ca",
        2,
        "--remote-cafile {f}",
    ),
    (["serve", "-l", "mqtts://127.0.0.1:0", "--tls-cert", "CERT", "--tls-key", "{f}"], "key", 1, "{f}"),
    (["dump", "{f}"], "payload", 1, "{f}"),
]


# A directory in place of a file: for the client commands (serve, dump and bridge open theirs alike).
RUNS = [(*case, how) for case in CASES for how in ("missing", "unreadable", "directory")
        if how != "directory" or case[0][0] in ("pub", "sub", "rr")]  # fmt: skip


@pytest.mark.parametrize(("args", "name", "code", "names", "how"), RUNS, ids=[f"{r[0][0]} {r[3]} {r[4]}" for r in RUNS])
def test_a_file_that_cannot_be_read_is_one_line_and_the_documented_code(
    mqtt: Mqtt, files: dict[str, Path], tmp_path: Path, args: list[str], name: str, code: int, names: str, how: str
) -> None:
    path = {"missing": tmp_path / "no" / "such.pem", "unreadable": files[f"locked-{name}"], "directory": tmp_path}[how]
    argv = [a.replace("{f}", str(path)).replace("KEY", str(files["key"])).replace("CERT", str(files["cert"]))
            for a in args]  # fmt: skip
    result = run_limited(argv, mqtt.env)  # type: ignore[attr-defined]
    stderr = result.stderr.decode()
    why = {"missing": "No such file or directory", "unreadable": "Permission denied", "directory": "Is a directory"}
    assert result.returncode == code, stderr
    assert stderr.startswith("mqtt: error: ") and stderr.count("\n") == 1, stderr
    assert names.replace("{f}", str(path)) in stderr and why[how] in stderr, stderr


def test_an_unreadable_profile_file_is_one_line(mqtt: Mqtt, tmp_path: Path) -> None:
    config = tmp_path / "config" / "mqtt-cli" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[profiles.default]\nhost = "localhost"\n')
    config.chmod(0)
    for args, code in ((["pub", "-t", "a", "-m", "x"], 2), (["config", "show"], 1)):
        result = run_limited(args, mqtt.env)  # type: ignore[attr-defined]
        assert result.returncode == code
        assert result.stderr.decode() == f"mqtt: error: cannot read {config}: Permission denied\n"
