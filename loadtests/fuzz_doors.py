"""The long door fuzz: the suite's hypothesis fuzz of the HTTP and gRPC doors, many more examples.

    python -m loadtests.fuzz_doors [--examples 5000] [--seed N]

One gateway (and emulated backend) on loopback; raw HTTP requests over sockets, request bodies
on both completion endpoints, gRPC messages on both streaming methods. Every answer must be HTTP
(or a closed socket) and never a 5xx or a traceback; every gRPC status a client's-fault one. A
failing input is printed by hypothesis: add it to ``tests/security/fuzz/corpus.json`` with why.
"""

from __future__ import annotations

import argparse
import time

from hypothesis import HealthCheck, given, seed, settings

from tests.security.fuzz_inputs import GRPC_OK_CODES, bodies, check_http_answer, raw_requests
from tests.security.fuzz_rig import raw_exchange, threaded_gateway
from tests.security.test_fuzz_doors import grpc_code, post


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    long_run = settings(
        max_examples=args.examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    with threaded_gateway() as target:

        @seed(args.seed)
        @long_run
        @given(request=raw_requests)
        def raw(request: bytes) -> None:
            check_http_answer(raw_exchange(target.port, request))

        @seed(args.seed)
        @long_run
        @given(body=bodies)
        def body(body: bytes) -> None:
            for path in ("/v1/chat/completions", "/v1/completions"):
                check_http_answer(post(target.port, path, body))

        @seed(args.seed)
        @long_run
        @given(message=bodies)
        def grpc_message(message: bytes) -> None:
            for method in ("ChatCompletion", "Completion"):
                assert grpc_code(target.grpc_target, method, message) in GRPC_OK_CODES

        for name, run in (("raw HTTP", raw), ("bodies", body), ("gRPC", grpc_message)):
            started = time.perf_counter()
            run()
            print(f"{name:<10} {args.examples} examples ok in {time.perf_counter() - started:.1f}s"
                  f" (seed {args.seed})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
