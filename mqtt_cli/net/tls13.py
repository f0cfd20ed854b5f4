"""TLS 1.3 cipher suites on an `ssl.SSLContext`, which the ssl module has no call for (its `set_ciphers` is for
TLS 1.2 and lower; mosquitto's listener option `ciphers_tls1.3` is OpenSSL's SSL_CTX_set_ciphersuites).

The context's SSL_CTX is reached through the OpenSSL library this process already loaded for the ssl module,
and only once two of its settings read through it agree with what the ssl module says (the pointer is the
SSL_CTX, not a guess); otherwise the setting is refused with a reason, never applied blindly.
"""

from __future__ import annotations

import ctypes
import ssl
from functools import cache

__all__ = ["set_tls13_ciphersuites"]


@cache
def _libssl() -> ctypes.CDLL | None:
    """The libssl the ssl module uses (already mapped into this process: dlopen gives that same copy)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "/libssl.so" in line}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    lib = ctypes.CDLL(paths.pop())
    for name, res in (("SSL_CTX_set_ciphersuites", ctypes.c_int), ("SSL_CTX_get_verify_mode", ctypes.c_int),
                      ("SSL_CTX_get_options", ctypes.c_uint64)):  # fmt: skip
        func = getattr(lib, name, None)
        if func is None:
            return None
        func.restype = res
        func.argtypes = [ctypes.c_void_p] + ([ctypes.c_char_p] if name == "SSL_CTX_set_ciphersuites" else [])
    return lib


def set_tls13_ciphersuites(ctx: ssl.SSLContext, suites: str) -> str | None:
    """Sets the TLS 1.3 suites (colon-separated names, TLS_AES_256_GCM_SHA384:...); why not, or None when done."""
    lib = _libssl()
    if lib is None:
        return "this Python's OpenSSL library cannot be reached to set them"
    # PySSLContext starts with its SSL_CTX pointer, right after the object header.
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer:
        return "this Python's SSLContext is not laid out as expected"
    if lib.SSL_CTX_get_verify_mode(pointer) != _verify_bits(ctx) or lib.SSL_CTX_get_options(pointer) != ctx.options:
        return "this Python's SSLContext is not laid out as expected"
    if lib.SSL_CTX_set_ciphersuites(pointer, suites.encode("ascii", "replace")) != 1:
        return "no TLS 1.3 cipher suite OpenSSL knows (names such as TLS_AES_256_GCM_SHA384, colon-separated)"
    return None


def _verify_bits(ctx: ssl.SSLContext) -> int:
    """OpenSSL's verify mode for the ssl module's (SSL_VERIFY_PEER 1, FAIL_IF_NO_PEER_CERT 2)."""
    return {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}[ctx.verify_mode]
