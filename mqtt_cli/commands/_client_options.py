"""Every option of the client commands (pub, sub, rr), defined once: one table per command, and the connection
options they share.

Each :class:`Opt` says what typer needs (names, kind, default, bounds, environment variable, help, panel,
placeholder) and what the one-shot fast path needs (whether it runs a command that gives the option). From these
tables `_options.with_options` writes each command's typer signature, `_fast.parse` reads a command line, and
`_options.rewrite_optional_values` knows which tokens are values. No typer here (nor anything the fast path
would not import anyway): the fast path loads this module at every `mqtt pub`.

A new client option is one `Opt` in its command's table (or in CONNECTION, for all three); the command (or
`client_settings`, for a connection option) reads its value under `param`.
"""

from enum import Enum
from typing import Any


class Kind(Enum):
    FLAG = "flag"
    STR = "str"
    INT = "int"
    FLOAT = "float"
    PATH = "path"
    LIST = "list"  # of str, repeatable


class Opt:
    """One option of a command: its parameter name, option names, kind, default, bounds and environment variable;
    its help, help panel and placeholder (None: the one _usage.py derives), hidden or not, and whether --help shows
    its default. `fast`: the fast path runs commands that give it on the command line.
    (A plain class: a hundred of these are made at each start, a frozen dataclass's are slower to make.)"""

    __slots__ = ("default", "env", "fast", "help", "hi", "hidden", "kind", "lo", "metavar", "names", "panel",
                 "param", "show_default")  # fmt: skip

    def __init__(
        self, param: str, names: tuple[str, ...], kind: Kind, default: Any = None, *, lo: float | None = None,
        hi: float | None = None, env: str | None = None, fast: bool = True, help: str | None = None,
        panel: str | None = None, metavar: str | None = None, hidden: bool = False, show_default: bool = True,
    ) -> None:  # fmt: skip
        self.param, self.names, self.kind, self.default = param, names, kind, default
        self.lo, self.hi, self.env, self.fast = lo, hi, env, fast
        self.help, self.panel, self.metavar, self.hidden, self.show_default = help, panel, metavar, hidden, show_default

    def __repr__(self) -> str:
        return f"Opt({self.param!r}, {self.names!r})"


F, S, N, FL, P, L = Kind.FLAG, Kind.STR, Kind.INT, Kind.FLOAT, Kind.PATH, Kind.LIST
_U32 = 0xFFFFFFFF

CONN = "Connection"
CRED = "Credentials"
TLS = "TLS"
WILL = "Will"
#: How every command names a profile (clients, `mqtt config set/show`).
PROFILE_FLAG = "--profile"
PROFILE_ENV = "MQTT_PROFILE"

#: The connection options of every client command, in the order of their signatures and --help.
CONNECTION = (
    Opt("host", ("-h", "--host"), S, env="MQTT_HOST", help="Broker host (default: localhost).", panel=CONN),
    Opt("port", ("-p", "--port"), N, lo=1, hi=65535, env="MQTT_PORT", panel=CONN,
        help="Broker port (default: 1883, 8883 with TLS)."),
    Opt("url", ("-L", "--url"), S, env="MQTT_URL", panel=CONN,
        help=r"mqtt\[s]://\[user\[:pass]@]host\[:port]\[/topic], ws\[s]://host\[:port]\[/path] or unix:///path."),
    Opt("unix", ("--unix",), S, env="MQTT_UNIX", fast=False, help="Connect to this Unix socket.", panel=CONN),
    Opt("client_id", ("-i", "--id"), S, env="MQTT_CLIENT_ID", help="Client identifier (default: random).",
        panel=CONN),
    Opt("id_prefix", ("-I", "--id-prefix"), S, help="Random client identifier with this prefix.", panel=CONN),
    Opt("keepalive", ("-k", "--keepalive"), N, lo=0, hi=65535, help="Keepalive in seconds (default: 60).",
        panel=CONN),
    Opt("protocol_version", ("-V", "--protocol-version"), S, env="MQTT_PROTOCOL_VERSION", panel=CONN,
        help="31, 311, 5 or auto (5, falling back to 3.1.1 when the broker refuses 5.0) (default: auto)."),
    Opt("no_clean", ("-c", "--disable-clean-session"), F, None, panel=CONN,
        help="Keep the session (subscriptions, queued messages) when disconnected; needs -i."),
    Opt("session_expiry", ("-x", "--session-expiry"), N, lo=0, hi=_U32, panel=CONN,
        help="5.0 session expiry interval in seconds."),
    Opt("connect_timeout", ("--connect-timeout",), FL, lo=0.1, help="Seconds to connect (default: 10).", panel=CONN),
    Opt("reconnect", ("--reconnect",), F, False, fast=False, panel=CONN,
        help="Reconnect (with backoff, on the same session) when the connection is lost; no loss at QoS 1/2."),
    Opt("debug", ("-d", "--debug"), F, False, panel=CONN,
        help="Print each packet sent and received to standard output, in mosquitto_pub/sub -d's words."),
    Opt("profile", (PROFILE_FLAG,), S, env=PROFILE_ENV, metavar="NAME", panel=CONN,
        help="Defaults from this profile (mqtt config)."),
    Opt("username", ("-u", "--username"), S, env="MQTT_USERNAME", help="User name.", panel=CRED),
    Opt("password", ("-P", "--password"), S, env="MQTT_PASSWORD", panel=CRED,
        help="Password; without a value, asked for on the terminal. Prefer MQTT_PASSWORD or --password-file."),
    Opt("password_prompt", ("--password-prompt",), F, False, fast=False, hidden=True),  # -P without a value
    Opt("password_file", ("--password-file",), S, env="MQTT_PASSWORD_FILE", panel=CRED,
        help="Read the password from this file (its first line)."),
    Opt("cafile", ("--cafile",), S, fast=False, help="CA certificates to trust (PEM); implies TLS.", panel=TLS),
    Opt("capath", ("--capath",), S, fast=False, help="Directory of CA certificates; implies TLS.", panel=TLS),
    Opt("cert", ("--cert",), S, fast=False, help="Client certificate (PEM).", panel=TLS),
    Opt("key", ("--key",), S, fast=False, help="Client private key (PEM).", panel=TLS),
    Opt("insecure", ("--insecure",), F, None, fast=False, help="TLS without checking the broker's certificate or name.",
        panel=TLS),
    Opt("tls_version", ("--tls-version",), S, fast=False, help="Minimum TLS version: tlsv1.2 or tlsv1.3.", panel=TLS),
    Opt("alpn", ("--alpn",), L, fast=False, help="ALPN protocol (repeatable).", panel=TLS),
    Opt("will_topic", ("--will-topic",), S, help="Will message topic.", panel=WILL),
    Opt("will_payload", ("--will-payload",), S, help="Will message payload.", panel=WILL),
    Opt("will_qos", ("--will-qos",), N, 0, lo=0, hi=2, help="Will QoS.", panel=WILL),
    Opt("will_retain", ("--will-retain",), F, False, help="Retain the will message.", panel=WILL),
    Opt("will_delay", ("--will-delay",), N, lo=0, help="5.0 will delay interval (s).", panel=WILL),
    Opt("will_expiry", ("--will-message-expiry",), N, lo=0, help="5.0 will message expiry (s).", panel=WILL),
    Opt("will_content_type", ("--will-content-type",), S, help="5.0 will content type.", panel=WILL),
    Opt("will_user_property", ("--will-user-property",), L, help="5.0 will user property k=v (repeatable).",
        panel=WILL),
)  # fmt: skip
#: The connection options' parameter names (what `client_settings` takes, as one dict).
CONNECTION_PARAMS = tuple(o.param for o in CONNECTION)

#: mosquitto's -D COMMAND NAME VALUE (_dprops.py), last of each command's own options.
D_PROPERTY = Opt(
    "d_property", ("-D", "--property"), L, metavar="COMMAND NAME VALUE", show_default=False,
    help="An MQTT 5.0 property, as mosquitto's clients take it (repeatable): -D PUBLISH user-property KEY VALUE, "
    "-D CONNECT session-expiry-interval 60, ... COMMAND: CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT "
    "or WILL; NAME: the spec's, in lowercase with hyphens.",
)  # fmt: skip

MSG = "Message"
V5 = "MQTT 5.0 message properties"
PUB = (
    Opt("topic", ("-t", "--topic"), S, help="Topic to publish to.", panel=MSG),
    Opt("message", ("-m", "--message"), S, help="The message.", panel=MSG),
    Opt("file", ("-f", "--file"), P, help="Send this file as one message (bytes as they are).", panel=MSG),
    Opt("stdin_file", ("-s", "--stdin-file"), F, False, help="Send all of standard input as one message.", panel=MSG),
    Opt("stdin_line", ("-l", "--stdin-line"), F, False, fast=False, panel=MSG,
        help="One message per line of standard input, on one connection; waits for every acknowledgement."),
    Opt("null_message", ("-n", "--null-message"), F, False, help="An empty message.", panel=MSG),
    Opt("json_lines", ("--json-lines",), F, False, fast=False, panel=MSG,
        help="Each line of standard input is a message in the JSON form `mqtt sub --json` writes."),
    Opt("encoding", ("--format",), S, metavar="text|hex|base64", panel=MSG,
        help="How -m, -f, -s and each -l line give the payload: as it is (text, the default), hex or base64."),
    Opt("qos", ("-q", "--qos"), N, lo=0, hi=2, help="QoS (default: 0).", panel=MSG),
    Opt("retain", ("-r", "--retain"), F, False, help="Retain the message.", panel=MSG),
    Opt("repeat", ("--repeat",), N, 1, lo=1, help="Publish the message N times.", panel=MSG),
    Opt("repeat_delay", ("--repeat-delay",), FL, 0.0, lo=0, help="Seconds between repeats.", panel=MSG),
    Opt("user_property", ("--user-property",), L, help="KEY=VALUE (repeatable).", panel=V5),
    Opt("content_type", ("--content-type",), S, panel=V5),
    Opt("response_topic", ("--response-topic",), S, panel=V5),
    Opt("correlation_data", ("--correlation-data",), S, panel=V5),
    Opt("message_expiry", ("--message-expiry",), N, lo=0, hi=_U32, help="Seconds.", panel=V5),
    Opt("payload_format", ("--payload-format",), N, lo=0, hi=1, help="0 bytes, 1 UTF-8 text.", panel=V5),
    Opt("topic_alias", ("--topic-alias",), N, lo=1, hi=65535, help="Topic alias to use.", panel=V5),
    D_PROPERTY,
)  # fmt: skip

SUBSCRIPTION = "Subscription"
OUT = "Output"
STOP = "When to stop"
SUB = (
    Opt("topic", ("-t", "--topic"), L, help="Topic filter (repeatable).", panel=SUBSCRIPTION),
    Opt("exclude", ("-T", "--filter-out"), L, help="Do not print topics matching this filter (repeatable).",
        panel=SUBSCRIPTION),
    Opt("qos", ("-q", "--qos"), N, lo=0, hi=2, help="QoS (default: 0).", panel=SUBSCRIPTION),
    Opt("no_local", ("--no-local",), F, False, help="5.0: not our own messages.", panel=SUBSCRIPTION),
    Opt("retain_as_published", ("--retain-as-published",), F, False, help="5.0: keep the retain flag as published.",
        panel=SUBSCRIPTION),
    Opt("retain_handling", ("--retain-handling",), N, 0, lo=0, hi=2, panel=SUBSCRIPTION,
        help="5.0: retained messages on subscribing: 0 always, 1 for a new subscription only, 2 never."),
    Opt("subscription_identifier", ("--subscription-identifier",), N, lo=1, hi=268435455,
        help="5.0 subscription identifier.", panel=SUBSCRIPTION),
    Opt("unsubscribe", ("-U", "--unsubscribe"), L, fast=False, help="Unsubscribe from this filter first (repeatable).",
        panel=SUBSCRIPTION),
    Opt("verbose", ("-v", "--verbose"), F, False, help="Print the topic, then the payload.", panel=OUT),
    Opt("fmt", ("-F", "--print-format"), S, metavar="TEMPLATE", panel=OUT,
        help="mosquitto_sub format: %t topic, %p payload, %q %r %m %l %x %X %I %U %j %J %C %D %E %F %P %R %S, @H."),
    Opt("json_out", ("--json",), F, False, panel=OUT,
        help="One JSON object per line, lossless (payload as text or base64, every 5.0 property, receive time)."),
    Opt("encoding", ("--format",), S, metavar="text|hex|base64|json", panel=OUT,
        help="How to write each payload: as it is (text, the default), hex, base64, or JSON pretty-printed."),
    Opt("hex_out", ("--hex",), F, False, help="Same as --format hex.", hidden=True),
    Opt("no_newline", ("-N", "--no-newline"), F, False, help="No newline after each message.", panel=OUT),
    Opt("output", ("--output",), P, fast=False, metavar="FILE", panel=OUT,
        help="Append the messages to FILE (one a line, in the chosen form) instead of standard output."),
    Opt("stats", ("--stats",), F, False, fast=False, panel=OUT,
        help="On exit, how many messages arrived, per topic and QoS, on standard error."),
    Opt("count", ("-C", "--count"), N, lo=1, help="Exit 0 after N messages.", panel=STOP),
    Opt("timeout", ("-W", "--timeout"), FL, lo=0.001, help="Exit 27 after S seconds (unless done before).",
        panel=STOP),
    Opt("exit_on_suback", ("-E", "--exit-on-subscribe"), F, False, help="Exit once subscribed.", panel=STOP),
    Opt("no_retained", ("-R", "--no-retained"), F, False, help="Do not print retained messages.", panel=STOP),
    Opt("retained_only", ("--retained-only",), F, False, panel=STOP,
        help="Print the retained messages and exit 0 once all have arrived (subscribes at QoS 0)."),
    Opt("remove_retained", ("--remove-retained",), F, False, fast=False, help="Clear each retained message received.",
        panel=STOP),
    D_PROPERTY,
)  # fmt: skip

REQUEST = "Request"
RR = (
    Opt("topic", ("-t", "--topic"), S, help="Topic of the request.", panel=REQUEST),
    Opt("response_topic", ("-e", "--response-topic"), S, help="Topic to wait for the response on.", panel=REQUEST),
    Opt("message", ("-m", "--message"), S, help="The request.", panel=REQUEST),
    Opt("file", ("-f", "--file"), P, help="Send this file as the request.", panel=REQUEST),
    Opt("stdin_file", ("-s", "--stdin-file"), F, False, help="Request from standard input.", panel=REQUEST),
    Opt("null_message", ("-n", "--null-message"), F, False, help="An empty request.", panel=REQUEST),
    Opt("qos", ("-q", "--qos"), N, lo=0, hi=2, help="QoS (default: 0).", panel=REQUEST),
    Opt("correlation_data", ("--correlation-data",), S, help="5.0: correlation data (default: random).",
        panel=REQUEST),
    Opt("timeout", ("-W", "--timeout"), FL, 30.0, lo=0.001, help="Seconds to wait for the response; then exit 27.",
        panel=REQUEST),
    Opt("verbose", ("-v", "--verbose"), F, False, help="Print the topic too.", panel=OUT),
    Opt("json_out", ("--json",), F, False, help="The response as one JSON object.", panel=OUT),
    Opt("encoding", ("--format",), S, metavar="text|hex|base64|json", panel=OUT,
        help="How to write the response's payload: as it is (text), hex, base64, or JSON pretty-printed."),
    Opt("hex_out", ("--hex",), F, False, help="Same as --format hex.", hidden=True),
    Opt("no_newline", ("-N", "--no-newline"), F, False, help="No newline after the response.", panel=OUT),
    D_PROPERTY,
)  # fmt: skip

#: Each client command's own options, in the order of its signature and --help (the connection options follow).
OWN: dict[str, tuple[Opt, ...]] = {"pub": PUB, "sub": SUB, "rr": RR}
#: Every option of each client command: its own, then the connection options.
OPTIONS: dict[str, tuple[Opt, ...]] = {command: own + CONNECTION for command, own in OWN.items()}


def option_names(command: str) -> tuple[frozenset[str], frozenset[str]]:
    """The names of `command`'s options that take a value, and of those that do not (--help among them)."""
    values = frozenset(n for o in OPTIONS[command] if o.kind is not Kind.FLAG for n in o.names)
    flags = frozenset(n for o in OPTIONS[command] if o.kind is Kind.FLAG for n in o.names) | {"--help"}
    return values, flags
