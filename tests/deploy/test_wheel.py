"""The wheel works alone: built from the source tree, installed into a fresh venv with no extras,
it answers ``--version``, validates a shipped example and serves the embedded default.

This is the install a user gets from ``pip install meridian-gateway``: nothing from the dev or
bench extras, nothing from this checkout on ``sys.path``. The dependencies come from the wheels
``make setup`` downloads (``scripts/runtime_wheelhouse.sh``: pyproject.toml's dependencies and
theirs), with ``--no-index``: pip resolves the wheel's declared requirements as it would from
the index, and the test itself reaches no network. The venv has no pip of its own (this one's
installs into it, ``--python``): a few seconds less, and nothing the user's install lacks.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.deploy.tools import DEPLOY, ROOT, run, serving
from tests.deploy.tools import installed as put_in_place

SHIPPED = (
    *("pyproject.toml", "setup.py", "build_support", "MANIFEST.in", "README.md"),
    *("gateway", "routing", "loadtests", "proto"),
)
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # scripts/runtime_wheelhouse.sh fills it
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet")
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding only the wheel and its declared dependencies; yields its bin/."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for name in SHIPPED:  # a copy, so the build's egg-info and build/ stay out of the checkout
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(path, source / name)
    wheelhouse = put_in_place(WHEELHOUSE / ".complete").parent  # by `make setup`
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", work / "dist", source])
    (wheel,) = (work / "dist").glob("meridian_gateway-*.whl")
    run([sys.executable, "-m", "venv", "--without-pip", work / "venv"])
    bin_dir = work / "venv" / "bin"
    into = ("--python", bin_dir / "python")
    run([*PIP, *into, "install", "--no-index", "--find-links", wheelhouse, wheel])
    yield bin_dir


def test_no_extra_is_installed(installed: Path) -> None:
    # Not PIP: --quiet hides the list.
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", installed / "python"]
    listed = run([*pip, "list", "--format=freeze"], cwd=installed)
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert "meridian-gateway" in names
    assert not names & {"matplotlib", "openai", "pytest"}


def test_version_and_check_config(installed: Path) -> None:
    from gateway import __version__

    version = run([installed / "meridian", "--version"], cwd=installed).stdout
    # A plain install is pure Python: only MERIDIAN_COMPILE=1 builds the routing extensions.
    assert version.strip() == f"meridian {__version__} (routing: interpreted)"
    checked = run(
        [
            installed / "meridian",
            "check-config",
            "--allow-missing-secrets",
            DEPLOY / "gateway.example.yaml",
        ],
        cwd=installed,
    )
    assert "OK" in checked.stdout


def test_serve_embedded_default_streams(installed: Path) -> None:
    """The embedded default starts from the installed wheel (emulated fleet included), answers a
    streaming request through the openai SDK and drains on SIGTERM."""
    args: list[str | Path] = [installed / "meridian", "serve", "--host", "127.0.0.1", "--port", "0"]
    with serving(args, cwd=installed) as served:
        client = OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
        models = [m.id for m in client.models.list()]
        stream = client.chat.completions.create(
            model=models[0],
            messages=[{"role": "user", "content": "Where does the time go?"}],
            max_tokens=4,
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        code, log = served.stop()
    assert code == 0, log
    assert "EMULATED" in log
    assert "Traceback" not in log


def test_installed_package_does_not_import_the_checkout(installed: Path) -> None:
    where = subprocess.run(
        [installed / "python", "-c", "import gateway; print(gateway.__file__)"],
        capture_output=True,
        text=True,
        cwd=installed,
        check=True,
    ).stdout
    assert str(installed.parent) in where
