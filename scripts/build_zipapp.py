"""Build the zipapp (`make zipapp`): shiv packs the project and its runtime dependencies, then its entry point is
replaced by one that starts `mqtt` at the cost of an installed command once shiv has unpacked it.

    .venv/bin/python scripts/build_zipapp.py dist/mqtt.pyz

shiv's zipapp unpacks its site-packages on the first run (to ~/.shiv/mqtt.pyz_<build id>/, or under $SHIV_ROOT)
and imports from there; --compile-pyc has that first run byte-compile them too, as pip does when it installs
(else, with PYTHONDONTWRITEBYTECODE set, every run would compile every module it imports from source).
shiv's own bootstrap runs on every run: it imports zipfile, json, pathlib, subprocess,
shutil, compileall and hashlib, reads the archive's directory and environment.json, and runs the console script
through runpy, which costs more than the command's own start. The entry point written here knows the build id
(it is fixed when the archive is built), so when the unpacked copy is there it puts it on sys.path and calls
`mqtt_cli.__main__:main` directly, with nothing imported but os and sys. The first run, and any run with one of
shiv's own SHIV_* settings besides SHIV_ROOT, goes through shiv's bootstrap unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERPRETER = "/usr/bin/env python3"
ENTRY_POINT = "mqtt_cli.__main__:main"

MAIN_TEMPLATE = '''\
# mqttkit's zipapp (scripts/build_zipapp.py): start `mqtt` from the copy shiv unpacked, else let shiv unpack it.
import os
import sys


def _unpacked():
    if any(name.startswith("SHIV_") and name != "SHIV_ROOT" for name in os.environ):
        return None  # one of shiv's own settings: its bootstrap honours them
    root = os.path.expanduser(os.environ.get("SHIV_ROOT") or "~/.shiv")
    name = os.path.basename(os.path.realpath(sys.argv[0]))
    site_packages = os.path.join(root, name + "_" + {build_id!r}, "site-packages")
    return site_packages if os.path.isdir(site_packages) else None


_site_packages = _unpacked()
if _site_packages is None:
    import _bootstrap

    _bootstrap.bootstrap()
else:
    sys.path[0] = _site_packages  # in place of the archive: its packages are imported from the unpacked copy
    from {module} import {function}

    sys.exit({function}())
'''


def run_shiv(source: Path, output: Path) -> None:
    shiv = Path(sys.executable).parent / "shiv"
    cmd = [str(shiv), "--console-script", "mqtt", "--output-file", str(output), "--python", INTERPRETER,
           "--reproducible", "--compressed", "--compile-pyc", str(source), "--quiet",
           "--disable-pip-version-check"]  # fmt: skip
    subprocess.run(cmd, check=True)


def replace_entry_point(archive: Path, output: Path) -> None:
    """Copies `archive` to `output` with the fast entry point as its __main__.py."""
    with zipfile.ZipFile(archive) as src:
        environment = json.loads(src.read("environment.json"))
        if environment.get("root") or environment.get("preamble") or environment.get("no_modify"):
            raise SystemExit("build_zipapp: shiv options this entry point does not know (root, preamble, no_modify)")
        if any(name.startswith("site-packages/") and name.endswith(".pth") for name in src.namelist()):
            raise SystemExit("build_zipapp: a dependency installs a .pth file, which this entry point does not run")
        module, function = ENTRY_POINT.split(":")
        main = MAIN_TEMPLATE.format(build_id=environment["build_id"], module=module, function=function)
        with open(archive, "rb") as f:
            prefix = f.readline()  # the shebang line
        tmp = output.with_name(output.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(prefix)
            with zipfile.ZipFile(f, "w") as dst:
                for info in src.infolist():
                    data = main.encode() if info.filename == "__main__.py" else src.read(info)
                    dst.writestr(info, data)
    tmp.chmod(0o755)
    os.replace(tmp, output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="where to write the zipapp (make zipapp: dist/mqtt.pyz)")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mqttkit-zipapp-") as tmp:
        built = Path(tmp) / args.output.name
        run_shiv(ROOT, built)
        replace_entry_point(built, args.output.resolve())


if __name__ == "__main__":
    main()
