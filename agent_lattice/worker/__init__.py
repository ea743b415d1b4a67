"""Build Temporal workers that serve an app's agents, and the converter they share."""

from ..activities._registry import AgentRegistry
from ._encryption import (
    EncryptionCodec,
    EncryptionKeys,
    UnencryptedPayloadError,
    UnknownEncryptionKeyError,
)
from ._plugin import LatticePlugin
from ._worker import create_worker, create_workers

__all__ = [
    "AgentRegistry",
    "EncryptionCodec",
    "EncryptionKeys",
    "LatticePlugin",
    "UnencryptedPayloadError",
    "UnknownEncryptionKeyError",
    "create_worker",
    "create_workers",
]
