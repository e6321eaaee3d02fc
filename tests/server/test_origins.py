"""The default Origin policy and ``--allowed-origin`` (origins.py): which browser pages
may open a WebSocket to the server, against cross-site WebSocket hijacking. What a real
browser sends is checked in tests/browser/test_origin_in_chromium.py."""

from __future__ import annotations

import logging

import pytest
import websockets
from websockets.asyncio.client import connect

from support import StartServer
from vrt.server.origins import OriginPolicy, normalise_origin


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("https://app.example", "https://app.example"),
        ("HTTPS://App.Example/", "https://app.example"),
        ("https://app.example:443", "https://app.example"),
        ("http://app.example:80/", "http://app.example"),
        ("http://app.example:8080", "http://app.example:8080"),
        ("http://[0:0:0:0:0:0:0:1]:3000", "http://[::1]:3000"),
        ("https://bücher.example", "https://xn--bcher-kva.example"),
        (" null ", "null"),
        ("app.example", None),
        ("https://app.example/chat", None),
        ("https://user@app.example", None),
        ("https://app.example?x=1", None),
        ("https://app.example:99999", None),
        ("https://", None),
    ],
)
def test_origins_are_compared_as_browsers_send_them(given: str, normal: str | None) -> None:
    assert normalise_origin(given) == normal


def test_the_default_policy_accepts_loopback_pages_and_the_servers_own_host() -> None:
    policy = OriginPolicy.build().listening_on("vrt.example")
    for origin in (
        None,  # not a browser
        "http://localhost:3000",
        "http://app.localhost",
        "http://127.0.0.1:8780",
        "http://127.8.9.10",
        "http://[::1]:5173",
        "https://vrt.example",
        "https://VRT.example:8443",
    ):
        assert policy.allows(origin), origin
    for origin in (
        "https://evil.example",
        "http://localhost.evil.example",
        "http://127.0.0.1.evil.example",
        "https://vrt.example.evil.example",
        "null",
        "",
        "file://",
        "chrome-extension://abcdef",
        "ws://localhost:3000",
        "http://localhost:3000/path",
    ):
        assert not policy.allows(origin), origin
    assert "loopback" in policy.describe()
    assert "vrt.example" in policy.describe()


def test_a_wildcard_host_makes_the_machines_name_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "Box")
    policy = OriginPolicy.build().listening_on("0.0.0.0")
    assert policy.allows("http://box:8080")
    assert not policy.allows("http://other:8080")
    assert OriginPolicy.build().listening_on("127.0.0.1").own_hosts == frozenset()


def test_allowed_origins_are_normalised_and_replace_the_default() -> None:
    policy = OriginPolicy.build(["HTTPS://App.Example:443/"]).listening_on("127.0.0.1")
    assert policy.allows("https://app.example")
    assert policy.allows("https://APP.example:443")
    assert policy.allows(None)
    for refused in ("http://app.example", "https://app.example:8443", "http://localhost:3000"):
        assert not policy.allows(refused), refused
    assert policy.warnings() == []
    assert "only from https://app.example" in policy.describe()


@pytest.mark.parametrize(
    ("value", "because"),
    [
        ("app.example", "did you mean https://app.example?"),
        ("https://app.example/chat", "did you mean https://app.example?"),
        ("wss://app.example", "did you mean https://app.example?"),
        ("https://*.example", "patterns are not supported"),
        ("ftp://app.example", "not ftp"),
    ],
)
def test_a_value_that_can_never_match_is_reported(value: str, because: str) -> None:
    warnings = OriginPolicy.build([value, "https://ok.example"]).warnings()
    assert len(warnings) == 1
    assert value in warnings[0]
    assert "can never match" in warnings[0]
    assert because in warnings[0]


def test_any_origin_and_null_are_accepted_only_when_listed_and_warned_about() -> None:
    anything = OriginPolicy.build(["*"])
    assert anything.allows("https://evil.example")
    assert anything.allows("null")
    assert any("any web site" in line for line in anything.warnings())
    null = OriginPolicy.build(["null"])
    assert null.allows("null")
    assert not null.allows("https://evil.example")
    assert any("sandboxed" in line for line in null.warnings())


async def status(url: str, origin: str | None) -> int:
    headers = {"Origin": origin} if origin is not None else {}
    try:
        async with connect(url, additional_headers=headers, open_timeout=5):
            return 101
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


async def test_the_server_refuses_other_sites_by_default(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start()
    assert await status(running.url, "https://evil.example") == 403
    assert await status(running.url, "http://127.0.0.1:9999") == 101
    assert await status(running.url, None) == 101
    assert any("evil.example" in r.getMessage() for r in caplog.records)


async def test_the_server_normalises_allowed_origins_and_warns_at_start(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="vrt")
    running = await start(allowed_origins=["HTTPS://App.Example/", "https://app.example/chat"])
    assert await status(running.url, "https://app.example") == 101
    assert await status(running.url, "http://127.0.0.1:9999") == 403
    assert any(
        "'https://app.example/chat' can never match" in r.getMessage() for r in caplog.records
    )


async def test_refusals_are_logged_at_most_once_per_interval(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A hostile page can make any number of refused requests: they cannot flood the log."""
    caplog.set_level(logging.INFO, logger="vrt")
    running = await start()
    for _ in range(20):
        assert await status(running.url, "https://evil.example") == 403
    refusals = [r for r in caplog.records if "refused a WebSocket" in r.getMessage()]
    assert len(refusals) == 1
    assert refusals[0].levelno == logging.WARNING
