"""Who may connect, as whom: a listener's authentication policy and the check of one CONNECT against it.

`BrokerCore` asks `authenticate` once per CONNECT (with the TLS client certificate's identity when the network
layer has one) and keeps the resulting user name; the ACL (acl.py) then decides topic by topic. mosquitto 2.0's
rules (handle__connect, mosquitto_unpwd_check_default):

* no user name: accepted only when anonymous access is allowed;
* a user name with a password file: the user must be in it and the password match;
* a user name without a password file (and no certificate identity): accepted only when anonymous access is
  allowed (mosquitto 2.0 does the same: the name is not checked by anything, so it is no proof of identity);
* `use_identity_as_username` / `use_subject_as_username`: the certificate's CN / whole subject is the user name,
  the CONNECT's user name and password are ignored, and a client without a certificate is refused.

Every refusal is "not authorized" (5.0: 0x87; 3.x: return code 5), as mosquitto answers, whatever the cause:
a client cannot tell a wrong password from an unknown user.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import Enum

from .acl import Acl, AclView
from .dynsec import DynamicSecurity
from .passwords import PasswordTable, verify_password

__all__ = [
    "OPEN_POLICY",
    "AuthPolicy",
    "AuthResult",
    "CertificateIdentity",
    "Refusal",
    "authenticate",
    "certificate_identity",
    "is_loopback",
    "unsafe_listener_error",
]


@dataclass(frozen=True, slots=True)
class CertificateIdentity:
    """A verified TLS client certificate, as the network layer read it."""

    common_name: str | None
    subject: str  # as mosquitto formats it (OpenSSL's RFC 2253 form: "CN=alice,O=Example,C=GB")


@dataclass(frozen=True, slots=True)
class AuthPolicy:
    """One listener's settings (or the broker's, without per-listener settings).

    `allow_anonymous` None means "not said": the network layer resolves it per listener (allowed on loopback,
    refused elsewhere with authentication configured, and a listener elsewhere without any refuses to start).
    """

    allow_anonymous: bool | None = None
    passwords: PasswordTable | None = None
    acl: Acl | None = None
    use_identity_as_username: bool = False
    use_subject_as_username: bool = False
    password_file: str | None = field(default=None, compare=False)  # where they came from, for messages
    acl_file: str | None = field(default=None, compare=False)
    # mosquitto's dynamic security: its clients log in and its roles decide (password and ACL files unused).
    dynsec: DynamicSecurity | None = field(default=None, compare=False)

    @property
    def controls_access(self) -> bool:
        """Whether topics are checked (an ACL file or dynamic security)."""
        return self.acl is not None or self.dynsec is not None

    def view(self, username: str | None, client_id: str) -> AclView | None:
        """One client's access under this policy (None: everything allowed)."""
        if self.dynsec is not None:
            return self.dynsec.view(username, client_id)
        return self.acl.view(username, client_id) if self.acl is not None else None

    @property
    def uses_certificates(self) -> bool:
        return self.use_identity_as_username or self.use_subject_as_username

    @property
    def has_authentication(self) -> bool:
        return self.passwords is not None or self.uses_certificates or self.dynsec is not None

    def resolved(self, loopback: bool) -> AuthPolicy:
        """The policy with `allow_anonymous` decided for a listener (see unsafe_listener_error first)."""
        if self.allow_anonymous is not None:
            return self
        return _replace_anonymous(self, loopback and not self.has_authentication)


def _replace_anonymous(policy: AuthPolicy, allow: bool) -> AuthPolicy:
    return AuthPolicy(
        allow,
        policy.passwords,
        policy.acl,
        policy.use_identity_as_username,
        policy.use_subject_as_username,
        policy.password_file,
        policy.acl_file,
        policy.dynsec,
    )


OPEN_POLICY = AuthPolicy(allow_anonymous=True)


class Refusal(Enum):
    """Why a CONNECT was refused (for the log: the client only learns "not authorized")."""

    ANONYMOUS = "anonymous access is not allowed"
    UNKNOWN_USER = "unknown user"
    NO_PASSWORD = "no password given"
    BAD_PASSWORD = "wrong password"
    NO_CERTIFICATE = "no client certificate (the listener takes the user name from it)"
    NO_COMMON_NAME = "the client certificate has no common name"
    DYNSEC = "dynamic security refused it (unknown or disabled client, another client id, or a wrong password)"
    UNCHECKED_USER = "a user name that nothing can check (no password file) and anonymous access is not allowed"


@dataclass(frozen=True, slots=True)
class AuthResult:
    username: str | None = None  # the name the ACL knows the client by
    refusal: Refusal | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None


def authenticate(
    policy: AuthPolicy,
    username: str | None,
    password: bytes | None,
    certificate: CertificateIdentity | None,
    client_id: str = "",
) -> AuthResult:
    if policy.uses_certificates:
        if certificate is None:
            return AuthResult(None, Refusal.NO_CERTIFICATE)
        if policy.use_subject_as_username:
            return AuthResult(certificate.subject)
        if certificate.common_name is None:
            return AuthResult(None, Refusal.NO_COMMON_NAME)
        return AuthResult(certificate.common_name)
    anonymous_ok = policy.allow_anonymous is not False
    if username is None:
        return AuthResult(None) if anonymous_ok else AuthResult(None, Refusal.ANONYMOUS)
    if policy.dynsec is not None:
        # mosquitto: a user name the plugin does not accept is refused (disabled, another client id, no password).
        if policy.dynsec.authenticate(username, password, client_id):
            return AuthResult(username)
        return AuthResult(username, Refusal.DYNSEC)
    table = policy.passwords
    if table is None:
        return AuthResult(username) if anonymous_ok else AuthResult(username, Refusal.UNCHECKED_USER)
    entry = table.get(username)
    if entry is None:
        return AuthResult(username, Refusal.UNKNOWN_USER)
    if password is None:
        return AuthResult(username, Refusal.NO_PASSWORD)
    if not verify_password(entry, password):
        return AuthResult(username, Refusal.BAD_PASSWORD)
    return AuthResult(username)


def is_loopback(host: str) -> bool:
    """Whether a listener address only accepts local connections ("localhost", 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def unsafe_listener_error(policy: AuthPolicy, where: str, host: str) -> str | None:
    """The message refusing to start a listener open to the network with no authentication at all and anonymous
    access not allowed explicitly; None when it may start."""
    if policy.allow_anonymous is not None or policy.has_authentication or is_loopback(host):
        return None
    return (
        f"listener {where} is reachable from other hosts and has no authentication: give a password file "
        "(--password-file) or certificate identities, or allow anonymous clients explicitly (--allow-anonymous)"
    )


# OpenSSL's short names for the attributes Python's ssl module spells out (getpeercert()["subject"]).
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "street",
    "domainComponent": "DC",
    "userId": "UID",
}
_RFC2253_SPECIAL = frozenset(',+"\\<>;=')


def _escape_rfc2253(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        code = ord(ch)
        if code < 0x20 or code == 0x7F or code > 0x7E:
            out.append("".join(f"\\{b:02X}" for b in ch.encode()))  # OpenSSL's ESC_CTRL and ESC_MSB
        elif ch in _RFC2253_SPECIAL or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def certificate_identity(subject: tuple[tuple[tuple[str, str], ...], ...]) -> CertificateIdentity:
    """The identity of a verified client certificate from its subject as Python's ssl module gives it
    (``getpeercert()["subject"]``): the first common name, and the subject as mosquitto prints it for
    use_subject_as_username (OpenSSL's X509_NAME_print_ex with XN_FLAG_RFC2253: last RDN first, comma-separated,
    short attribute names)."""
    common_name = None
    rdns = []
    for rdn in subject:
        parts = []
        for name, value in rdn:
            if name == "commonName" and common_name is None:
                common_name = value
            parts.append(f"{_SHORT_NAMES.get(name, name)}={_escape_rfc2253(value)}")
        rdns.append("+".join(parts))
    return CertificateIdentity(common_name, ",".join(reversed(rdns)))
