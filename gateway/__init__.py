"""Meridian's I/O side: HTTP/SSE and gRPC servers, upstream clients, signals, state, CLI."""

__version__ = "0.1.0"
