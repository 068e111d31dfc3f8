"""Suite-wide settings.

Hypothesis runs derandomized (the same examples on every run and machine) and without a
per-example deadline: a property that holds for the examples it tried today must not fail
tomorrow on a new random example or on a busy machine's slow one — either would be a flaky
suite. Random exploration is a separate, deliberate act: ``MERIDIAN_HYPOTHESIS=explore``
(or ``python -m loadtests.fuzz_doors`` for the doors), and any input it finds is pinned with
``@example`` in the test.

Every test talks to loopback only. A machine whose environment names an HTTP proxy (CI
runners behind one often do) would have urllib and the openai SDK send their requests for
127.0.0.1 to it (aiohttp ignores the environment): loopback is added to ``NO_PROXY`` for the
suite and the processes it starts; the proxy stays for anything else (pip, in the wheel test).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("suite", derandomize=True, deadline=None, database=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("MERIDIAN_HYPOTHESIS", "suite"))


def _loopback_bypasses_proxies() -> None:
    loopback = ["127.0.0.1", "localhost", "::1"]
    for name in ("NO_PROXY", "no_proxy"):
        present = [host.strip() for host in os.environ.get(name, "").split(",") if host.strip()]
        os.environ[name] = ",".join(present + [h for h in loopback if h not in present])


_loopback_bypasses_proxies()
