"""mqttkit: one ``mqtt`` command for everything around MQTT.

This module is imported by every part of the package, ``mqtt_cli.core`` included, and by the fast
``mqtt --version`` path: it must import nothing but `buildmode`, which picks the compiled or the pure Python
build of the hot modules before anything imports them.
"""

from mqtt_cli import buildmode

buildmode.select()

__version__ = "0.2.0"
#: The distribution's name on the package index (`pip install mqttkit`): what `mqtt --version` names.
DIST_NAME = "mqttkit"

#: The command's name, whatever it was started as (console script, ``python -m mqtt_cli``, zipapp).
PROG_NAME = "mqtt"
#: The environment variable through which a shell asks the command for completions.
COMPLETE_VAR = "_MQTT_COMPLETE"


def version_text() -> str:
    """What ``mqtt --version`` prints: the version and which build runs (compiled: mypyc, or pure Python)."""
    build = buildmode.BUILD
    if buildmode.WHY_PURE:
        build += f": {buildmode.WHY_PURE}"
    return f"{DIST_NAME} {__version__} ({build})"
