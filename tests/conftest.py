"""Suite-wide settings.

Hypothesis runs derandomized (the same examples on every run and machine) and without a
per-example deadline: a property that holds for the examples it tried today must not fail
tomorrow on a new random example or on a busy machine's slow one — either would be a flaky
suite. Random exploration is a separate, deliberate act: ``MERIDIAN_HYPOTHESIS=explore``
(or ``python -m loadtests.fuzz_doors`` for the doors), and any input it finds is pinned with
``@example`` in the test.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("suite", derandomize=True, deadline=None, database=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("MERIDIAN_HYPOTHESIS", "suite"))
