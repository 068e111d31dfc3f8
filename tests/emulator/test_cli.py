"""``meridian emulate`` as a real process: announces its listeners, serves, exits on SIGTERM."""

from __future__ import annotations

import json
import signal
import urllib.request

from tests.emulator.helpers import read_announcements, spawn_emulate
from tests.servers import PROCESS_BOUND_S


def test_single_backend_process() -> None:
    process = spawn_emulate("--backend", "solo", "--model", "m", "--engine", "decode_base_ms=5")
    try:
        (line,) = read_announcements(process)
        assert line["name"] == "solo" and line["models"] == ["m"]
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode()
        request = urllib.request.Request(
            f"{line['url']}/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PROCESS_BOUND_S) == 0


def test_bad_arguments_exit_2() -> None:
    process = spawn_emulate("--backend", "x", "--engine", "max_num_seqs=-1")
    assert process.wait(timeout=PROCESS_BOUND_S) == 2
    assert process.stderr is not None and "max_num_seqs" in process.stderr.read()
