"""The C client SDK (clients/c/, docs/c-sdk.md) from the outside: its generated tables
are those of the protocol's sources, its unit tests pass, the client conformance suite
passes on its client under test, and its example chats with a real ``vrt serve``, runs a
tool and survives a dropped connection with every sequenced message exactly once (§5.4).

The C code is built once per run (conftest.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from support.processes import vrt_command, vrt_serve
from vrt.conformance.client_suite import run_client_suite

ROOT = Path(__file__).resolve().parents[2]
C_ROOT = ROOT / "clients" / "c"


def test_generated_tables_are_up_to_date() -> None:
    """clients/c's header, table source and vector data are what gen_tables.py makes of
    schema/, examples/ and vrt.protocol.tables today (nothing transcribed by hand)."""
    result = subprocess.run(
        [sys.executable, str(C_ROOT / "tools" / "gen_tables.py"), "--check"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_unit_tests_pass(build: Path) -> None:
    result = subprocess.run(
        [str(build / "vrt_tests")], capture_output=True, text=True, timeout=60, check=False
    )
    last = result.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"(\d+) passed, (\d+) failed", last)
    assert match is not None, result.stdout
    assert match.group(2) == "0", result.stderr
    assert int(match.group(1)) > 400, result.stdout


def test_client_conformance_suite_passes(build: Path) -> None:
    """`vrt conformance client -- vrt-c-client-under-test`: every check, MUSTs included."""
    status = run_client_suite([str(build / "vrt-c-client-under-test")], jobs=2)
    assert status == 0


def chat(build: Path, url: str, *lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(build / "vrt-c-chat"), url, *lines],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_chat_tool_and_dropped_connection(build: Path) -> None:
    """Against ``vrt serve --agent scripted``: a reply, a tool call answered by the
    device, and a burst of 300 sequenced messages across a dropped connection (the socket
    closed without a close frame, then a resume): each chunk once, in order (§4.3, §5.4)."""
    vrt_command()
    with vrt_serve() as url:
        result = chat(
            build,
            url,
            "echo hello device",
            'call device.status {"verbose":true}',
            "burst 300",
            "/drop",
            "echo after the drop",
        )
    assert result.returncode == 0, result.stderr
    burst = " ".join(f"chunk {n}" for n in range(1, 301))
    assert result.stdout.splitlines() == [
        "agent: hello device",
        'tool: device.status {"verbose":true}',
        'agent: result ok {"battery":87,"asked":{"verbose":true}}',
        f"agent: {burst}",
        "agent: after the drop",
    ]
    assert "dropping the connection" in result.stderr
    assert "resumed session" in result.stderr


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``vrt serve`` on wss:// with a certificate from a test CA; (its URL, the CA file)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    chain, key, cafile = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(cafile))
    with vrt_serve("--tls-cert", str(chain), "--tls-key", str(key)) as url:
        yield url.replace("ws://127.0.0.1", "wss://localhost"), cafile


def test_chat_over_tls(build: Path, tls_server: tuple[str, Path], tmp_path: Path) -> None:
    """wss:// through mbedTLS (§2.1): the server's certificate is verified against the
    given CA, a resume works over TLS, and a certificate of another CA is refused."""
    url, cafile = tls_server
    env = dict(os.environ, VRT_CA_FILE=str(cafile))
    result = subprocess.run(
        [str(build / "vrt-c-chat"), url, "echo over tls", "burst 50", "/drop", "echo again"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    burst = " ".join(f"chunk {n}" for n in range(1, 51))
    assert result.stdout.splitlines() == ["agent: over tls", f"agent: {burst}", "agent: again"]
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    refused = subprocess.run(
        [str(build / "vrt-c-chat"), url, "echo never"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, VRT_CA_FILE=str(other)),
        check=False,
    )
    assert refused.returncode == 1
    assert "Certificate verification failed" in refused.stderr
    assert "agent:" not in refused.stdout


def test_core_calls_nothing_but_memory_and_string_functions(build: Path) -> None:
    """The core allocates nothing and does no I/O: the only functions outside it that
    libvrt_core.a calls are the C library's mem* and str* (no malloc, no free, no clock,
    no socket, no printf)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to read the library's symbols")
    listing = subprocess.run(
        [nm, str(build / "libvrt_core.a")], capture_output=True, text=True, check=True
    ).stdout
    defined, undefined = set(), set()
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3:
            defined.add(parts[2])
    allowed = {"memcmp", "memcpy", "memmove", "memset", "strcmp", "strlen", "strncmp"}
    # A sanitized build (VRT_SANITIZE) also calls its sanitizers' runtime.
    outside = {name for name in undefined - defined if not name.startswith(("__asan", "__ubsan"))}
    assert outside <= allowed, outside
