"""TLS for ``wss://`` (§2.1): the contexts a client uses, and errors that say what was trusted.

A ``wss://`` URL without an explicit context gets :func:`system_context`: the system
trust store, where ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` replace the default file and
directory (OpenSSL reads them when the context is made). :func:`cafile_context`
trusts the CA certificates of one PEM file instead; :func:`insecure_context` verifies
nothing and is for test servers only.

A failed handshake usually means "the server's certificate is not signed by a CA I
trust", and the fix is to trust the right file: :func:`describe_tls_error` says which
certificates were trusted, so the message names the file to change.

A ``wss://`` URL of a server that speaks plain ``ws://`` fails differently: the server
waits for an HTTP request and never answers the TLS handshake. :func:`plain_http_answer`
asks it in plain HTTP instead, so that a client can say so at once
(:data:`PROBE_AFTER`) rather than at the end of its open timeout.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "PROBE_AFTER",
    "cafile_context",
    "describe_tls_error",
    "insecure_context",
    "plain_http_answer",
    "system_context",
    "system_trust",
]

#: A ``wss://`` handshake not done after this long: ask the server in plain HTTP
#: whether it speaks TLS at all (a handshake across an ocean takes well under this).
PROBE_AFTER: Final = 0.5
#: How long that question may take.
PROBE_TIMEOUT: Final = 3.0


async def plain_http_answer(url: str) -> bool:
    """Whether the server of the ``wss://`` ``url`` answers a plain HTTP request in
    plain HTTP: then it does not speak TLS, and a TLS handshake with it would wait until
    it gives up. False when it does not answer, or not in HTTP."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 443
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                shown = f"[{host}]" if ":" in host else host
                writer.write(f"GET / HTTP/1.1\r\nHost: {shown}:{port}\r\n\r\n".encode())
                await writer.drain()
                return (await reader.read(5)) == b"HTTP/"
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return False


def system_context() -> ssl.SSLContext:
    """Verify the server against the system trust store (and ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` when set), checking its host name."""
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)


def cafile_context(cafile: str | os.PathLike[str]) -> ssl.SSLContext:
    """Verify the server against the CA certificates in ``cafile`` (PEM) only.

    Raises :class:`ValueError` naming the file when it cannot be read or holds no
    certificate.
    """
    path = Path(cafile)
    try:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(path))
    except OSError as exc:  # ssl.SSLError is an OSError too
        problem = exc.strerror or getattr(exc, "reason", None) or str(exc)
        if isinstance(exc, ssl.SSLError):
            problem = f"not a PEM file of CA certificates ({problem})"
        raise ValueError(f"{path}: {problem}") from exc


def insecure_context() -> ssl.SSLContext:
    """Encrypt without verifying the server's certificate or host name: anyone on the
    path can pose as the server. For a test server with a throwaway certificate only."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def system_trust() -> str:
    """Which certificates :func:`system_context` trusts, naming the files."""
    file, folder = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if file or folder:
        named = [
            f"{name}={value}"
            for name, value in (("SSL_CERT_FILE", file), ("SSL_CERT_DIR", folder))
            if value
        ]
        return ", ".join(named)
    paths = ssl.get_default_verify_paths()
    where = [p for p in (paths.cafile, paths.capath) if p]
    return "the system trust store" + (f" ({', '.join(where)})" if where else "")


def describe_tls_error(error: ssl.SSLError, trusted: str) -> str:
    """One line for a failed TLS handshake; ``trusted`` says what was trusted."""
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or error.reason or "verification failed"
        return f"the server's TLS certificate was not accepted: {why} (trusted: {trusted})"
    return f"TLS handshake failed: {error.reason or error}"
