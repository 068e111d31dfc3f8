"""What the deploy tests share: the repository root, external tools, and a served gateway.

The deploy checks need tools that are not Python packages of the project (terraform, kubectl,
podman, checkov...). ``make test`` installs them (scripts/install_deploy_tools.sh) and sets
``MERIDIAN_DEPLOY_TOOLS=required``, so in CI a missing tool fails the test; a developer running
``pytest`` by hand without them gets a skip that names the tool and the make target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
TOOLS_BIN = ROOT / ".venv-deploy" / "bin"  # scripts/install_deploy_tools.sh installs there
MERIDIAN = VENV_BIN / "meridian"  # this checkout's, whatever else is on PATH
READY_LINE = "meridian listening on "


def tool(name: str) -> str:
    """The path of an external tool: PATH first (the machine's own), then the tools venv."""
    search = os.pathsep.join([os.environ.get("PATH", ""), str(VENV_BIN), str(TOOLS_BIN)])
    found = shutil.which(name, path=search)
    if found is not None:
        return found
    missing(name)


def installed(path: Path) -> Path:
    """A file the tools install puts in place (a schema, the tools venv's python)."""
    if not path.exists():
        missing(str(path))
    return path


def missing(what: str) -> NoReturn:
    message = f"{what} not found: `make test` installs it (scripts/install_deploy_tools.sh)"
    if os.environ.get("MERIDIAN_DEPLOY_TOOLS") == "required":
        pytest.fail(message)
    pytest.skip(message)


def run(args: Sequence[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure shows its output in the test report."""
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result  # type: ignore[no-any-return]


def run_failing(args: Sequence[str | Path]) -> str:
    """Run a command that must fail; its output."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    log: IO[str]

    def logged(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then the exit code and everything the process logged."""
        self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=60)
        return self.process.returncode, self.logged()


@contextlib.contextmanager
def serving(args: Sequence[str | Path], **kwargs: object) -> Iterator[Served]:
    """Start ``meridian serve`` (or anything that prints its ready line) and wait for the line.

    The log goes to a file, not a pipe: nobody reads a pipe while the test runs, and a full one
    would block the server."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [str(a) for a in args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            **kwargs,  # type: ignore[call-overload]
        )
        served = Served(process, "", log)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith(READY_LINE):
                    served.url = line[len(READY_LINE) :].strip()
                    yield served
                    return
            process.wait(timeout=60)
            raise AssertionError(f"exited {process.returncode} before ready:\n{served.logged()}")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=60)
