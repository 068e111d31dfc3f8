"""Moved to :mod:`gateway.lifecycle.seam` (the relay core's door seam); re-exported here."""

from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    InferenceBackend,
    Metadata,
    ModelEntry,
    RpcKind,
    StreamChunk,
    StreamEnded,
    StreamFailed,
    StreamOpened,
)

__all__ = [
    "BackendEvent",
    "BackendRequest",
    "InferenceBackend",
    "Metadata",
    "ModelEntry",
    "RpcKind",
    "StreamChunk",
    "StreamEnded",
    "StreamFailed",
    "StreamOpened",
]
