"""A newcomer's first commands, run as the README writes them."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.deploy.tools import ROOT, serving

MERIDIAN = [sys.executable, "-m", "gateway.cli"]


def test_a_port_in_use_is_one_clear_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*MERIDIAN, "serve", "--log-level", "WARNING", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"meridian serve: cannot listen on 127.0.0.1:{port}: address already in use"
        " (choose another with --port, or PORT=... make run)"
    ]


def test_make_run_takes_a_port() -> None:
    # -o: use the venv as it is (the test must not reinstall it); PORT=0 asks for any free port,
    # and the ready line says which one was bound instead of the default 8080.
    args = ["make", "--no-print-directory", "-s", "-o", ".venv/.installed", "run", "PORT=0"]
    with serving(args, cwd=ROOT) as served:
        assert not served.url.endswith(":8080")
        with urllib.request.urlopen(served.url + "/healthz", timeout=30) as response:
            assert response.status == 200
        # SIGTERM to the gateway itself, as a terminal's Ctrl-C would reach it: make then exits
        # with the gateway's own status.
        pid = served.process.pid
        (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        os.kill(int(child), signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0, served.logged()


PLACEHOLDERS = {
    "F": "deploy/gateway.example.yaml",
    "FLEET.yaml": "loadtests/fleets/three-region.yaml",
    "R": "us-east",
    "U": "http://127.0.0.1:9",
    "W": "loadtests/workloads/smoke.yaml",
    "M": "llama-3.1-70b-instruct",
    "URL": "redis://127.0.0.1:9/0",
}
LONG_RUNNING = {"serve", "emulate"}  # run for real by test_wheel.py, tests/emulator, above


def _leading_words(command: str) -> list[str]:
    """``meridian state inspect`` of ``meridian state inspect --config F``."""
    words = []
    for word in command.split():
        if word.startswith(("-", "[")) or word.isupper() or "." in word:
            break
        words.append(word)
    return words


def _readme_commands() -> list[str]:
    """Every command of the README's command table, alternatives and optional flags expanded."""
    table = ROOT.joinpath("README.md").read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    commands = []
    for cell in re.findall(r"^\| (.*?) \|", table, flags=re.M):
        spans = re.findall(r"`([^`]*)`", cell)
        if not spans or not spans[0].startswith("meridian"):
            continue
        base = spans[0]
        commands.append(re.sub(r"\s*\[[^\]]*\]", "", base))  # without the optional parts
        commands.append(re.sub(r"\[([^\]]*)\]", r"\1", base))  # with them
        stem = " ".join(w for w in _leading_words(base))
        commands += [f"{stem} {alt}" for alt in spans[1:] if alt.startswith("--")]
    return list(dict.fromkeys(commands))


def test_readme_commands_parse_as_written(tmp_path: Path) -> None:
    """Each runs with its placeholders filled in and is never refused by its argument parser
    (exit 2 with a usage line), which is what a reader typing it would hit first."""
    (tmp_path / "P").write_text("Where does the time go?")
    for name in ("A.json", "B.json"):
        (tmp_path / name).write_text("{}")
    values = PLACEHOLDERS | {"P": str(tmp_path / "P"), "D": str(tmp_path / "out")}
    values |= {"A.json": str(tmp_path / "A.json"), "B.json": str(tmp_path / "B.json")}
    commands = _readme_commands()
    assert any(c.startswith("meridian state inspect --") for c in commands)
    for command in commands:
        words = [values.get(w, w) for w in shlex.split(command)[1:]]
        if words and words[0] in LONG_RUNNING:
            continue
        if words[:1] == ["sim"]:
            words.append("--help")  # a full simulation is tests/sim's job; the file must exist
            target = words[2] if words[1] == "--replay" else words[1]  # a trace, or a scenario
            assert (ROOT / target).exists() or target == "SCENARIO.yaml"
        done = subprocess.run(
            [*MERIDIAN, *words], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        refused = done.returncode == 2 and "usage:" in done.stderr
        assert not refused, f"{command}: {done.stderr}"
        assert "Traceback" not in done.stderr, f"{command}: {done.stderr}"


@pytest.mark.parametrize("python", ["/nonexistent/python3"])
def test_prereqs_say_what_is_missing(python: str) -> None:
    done = subprocess.run(
        ["sh", "scripts/check_prereqs.sh"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHON": python},
    )
    assert done.returncode == 1
    assert f"{python} not found: install Python >= 3.11" in done.stderr
