"""Artifacts between stages: their serialized form, their manifests and the stores that keep them."""

from .codecs import StoredArtifact, decode_artifact, encode_artifact
from .manifest import Manifest, check_key
from .store import FsspecStore, MemoryStore, Store, open_store

__all__ = ["FsspecStore", "Manifest", "MemoryStore", "Store", "StoredArtifact", "check_key", "decode_artifact",
           "encode_artifact", "open_store"]
