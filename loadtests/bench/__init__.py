"""The load generator: ``meridian bench`` and the in-process API other benchmarks call.

Use ``run_bench(url, workload, options)`` to drive an OpenAI-compatible endpoint and get a
``BenchResult`` (every request's record), then ``summarize(result, slo)`` for the report.
"""

from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.report import BenchReport, summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.stats import Slo
from loadtests.bench.workload import Workload, load_workload

__all__ = [
    "BenchOptions",
    "BenchReport",
    "BenchResult",
    "RequestRecord",
    "Slo",
    "Workload",
    "load_workload",
    "run_bench",
    "summarize",
]
