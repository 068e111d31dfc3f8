"""Module-scoped stacks of real processes: one emulated fleet and one gateway in front of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Node, Process, gateway_config, start_fleet, start_gateway


@dataclass(frozen=True, slots=True)
class Stack:
    gateway: str  # base URL
    nodes: dict[str, Node]
    config: dict[str, Any]
    workdir: Path


Launch = Callable[..., Stack]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    processes: list[Process] = []

    def start(
        fleet_file: Path, gateway_region: str, signals: dict[str, Any], **extra: Any
    ) -> Stack:
        workdir = tmp_path_factory.mktemp(fleet_file.stem)
        fleet, nodes = start_fleet(fleet_file, gateway_region, workdir)
        processes.append(fleet)
        config = gateway_config(fleet_file, gateway_region, nodes, signals, **extra)
        gateway, url = start_gateway(config, workdir, fleet_file.stem)
        processes.append(gateway)
        return Stack(url, nodes, config, workdir)

    yield start
    for process in reversed(processes):
        process.stop()
