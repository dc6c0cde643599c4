"""``sits-observe agent`` refuses a ``--service`` that is not an http(s) base URL at start.

A bad URL used to start the agent, which then spooled every batch forever (each delivery
failed in httpx). The command must instead exit with code 2 and one line saying why, before
it touches the spool directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sits_observe.collectors.agent.shipper import Shipper, service_url
from sits_observe.errors import ConfigError

#: A dcgm-exporter body on disk (the DCGM collector reads a file as well as a URL).
DCGM_BODY = 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",modelName="NVIDIA L4",Hostname="n1"} 1024\n'


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("not a url", "whitespace"),
        ("sits-observe:8080", "scheme"),
        ("ftp://sits-observe:8080", "scheme"),
        ("http://", "host"),
        ("http:///api", "host"),
        ("http://bad_host!:8080", "host"),
        ("http://sits:99999", "port"),
        ("http://sits:80a", "port"),
        ("http://sits:8080/?x=1", "query"),
        ("http://sits:8080/#top", "fragment"),
        ("http://user:secret@sits:8080", "credentials"),
    ],
)
def test_bad_service_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        service_url(url)
    message = str(caught.value)
    assert why in message and repr(url) in message and "\n" not in message
    with pytest.raises(ConfigError):
        Shipper(url, "token", node="n1")


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://sits-observe:8080", "http://sits-observe:8080"),
        ("https://sits.example.com/", "https://sits.example.com"),
        ("http://10.0.0.5:8080/sits/", "http://10.0.0.5:8080/sits"),
        ("http://[fd00::1]:8080", "http://[fd00::1]:8080"),
        ("HTTP://Sits-Observe.sits-observe.svc:8080", "HTTP://Sits-Observe.sits-observe.svc:8080"),
    ],
)
def test_good_service_urls_are_kept(url: str, base: str) -> None:
    assert service_url(url) == base
    assert Shipper(url, "token", node="n1").url == base + "/api/v1/ingest"


def test_the_agent_command_exits_2_at_start_on_a_bad_service_url(tmp_path: Path) -> None:
    dcgm = tmp_path / "dcgm.prom"
    dcgm.write_text(DCGM_BODY, encoding="utf-8")
    spool = tmp_path / "spool"
    args = [sys.executable, "-m", "sits_observe.surfaces.cli.agent", "--service", "not a url"]
    args += ["--node", "n1", "--dcgm-url", str(dcgm), "--no-nvml", "--spool-dir", str(spool)]
    done = subprocess.run(
        args,
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "SITS_TOKEN": "t", "COLUMNS": "200"},
        timeout=60,  # today's agent never returns: it spools forever
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "--service 'not a url'" in lines[0] and "whitespace" in lines[0]
    assert "http" in lines[0]  # says what is allowed
    assert not spool.exists()  # refused before anything was created
