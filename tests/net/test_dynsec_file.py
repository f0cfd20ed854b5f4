"""Reading dynamic security's file (net/auth_files.py): what a start says about a file it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqtt_cli.net.auth_files import AuthFileError, load_dynsec_file


def test_a_file_that_cannot_be_used_is_named_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(AuthFileError, match=r"does not exist: make one with `mosquitto_ctrl dynsec init .* admin`"):
        load_dynsec_file(tmp_path / "missing.json")
    bad = {"clients": [{"username": "u", "salt": "!", "password": "x", "iterations": 1}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(AuthFileError, match=r"bad.json: client 'u': the salt is not base64"):
        load_dynsec_file(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text("")
    assert load_dynsec_file(tmp_path / "empty.json").clients == {}  # as mosquitto: nothing configured yet
