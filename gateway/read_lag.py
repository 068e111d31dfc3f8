"""How long a backend's bytes waited in the kernel before the gateway read them.

Under a burst one turn of the event loop runs for seconds, and a first token that arrives
meanwhile waits unread. The time from sending a request to reading its first token
(``upstream_ttfb``) counted that wait as the backend's, and routing learned it: the predictor's
offsets and the hedging delay's observed TTFTs made every backend the gateway served slower by
the gateway's own lag, after the burst as during it.

The kernel knows when the bytes came: TCP_INFO's ``tcpi_last_data_recv`` is how long ago the
connection's newest data segment arrived. Read just after the first token is read, it is that
token's wait, or less if later bytes came too (never more, with a tick taken off), so
``upstream_ttfb`` less it is the backend's share and what routing learns; the wait itself is
the gateway's own time (``upstream_read_lag`` in Server-Timing). It costs a ``getsockopt``
(~15-60 us on a c=1 path's cold caches), so the attempt asks only while the loop is behind (a
lag sample of the last 2 s was late, or the turn in progress has run past the next one's due
time: ``gateway/loop_health.LatestLag.behind``) or for a first token later than routing
expected. Probes and canaries ask every time (gateway/signals/probe_measure.py).
"""

from __future__ import annotations

import socket
import sys
from typing import Protocol

# struct tcp_info (linux/tcp.h): eight u8 fields, then u32s: rto, ato, snd_mss, rcv_mss,
# unacked, sacked, lost, retrans, fackets, last_data_sent, last_ack_sent, last_data_recv.
_TCP_INFO_BYTES = 104
_LAST_DATA_RECV = slice(52, 56)
_AVAILABLE = sys.platform == "linux" and hasattr(socket, "TCP_INFO")

# The kernel clock's tick, at most (1-10 ms): below this a reading is no wait (a free loop reads
# its bytes within microseconds of their arrival), and above it a reading may be up to a tick
# more than the wait, so a tick is taken off. A wait is then never overstated: a probe's round
# trip of ~1 ms less a reading a tick long read -1.8 ms (session 31).
FLOOR_MS = 10.0


class TcpSocket(Protocol):
    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


def unread_ms(sock: TcpSocket | None) -> float:
    """How long the newest bytes on ``sock`` had waited unread, in ms, at least: the kernel's
    reading less ``FLOOR_MS`` (0 below it), 0 for no TCP socket or where the kernel does not
    say (not Linux)."""
    if sock is None or not _AVAILABLE:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    except OSError:
        return 0.0
    if len(info) < _LAST_DATA_RECV.stop:
        return 0.0
    waited = float(int.from_bytes(info[_LAST_DATA_RECV], sys.byteorder))
    return max(0.0, waited - FLOOR_MS)
