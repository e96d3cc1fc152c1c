"""Signed manifests and plan files: what tells an entry this cache wrote from one forged by another writer.

A sha256 per data file stops accidental corruption, not forgery: anyone who can write to the store
can replace a matrix and write a manifest with consistent checksums.  With a secret, every manifest
carries an HMAC-SHA256 over its canonical content (key, kind, every data file's size and sha256, every
array's description, versions, metadata), and a reader holding the same secret refuses a manifest
whose signature is missing or wrong.  A staged run's plan file, which travels with the store, is signed the
same way under its own domain (a manifest's signature never passes for a plan's).  The secret is never stored,
logged or hashed into a key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ArtifactSignatureError, ConfigError

#: The environment variable a :class:`~vertebrae.artifacts.cache.CacheConfig` without ``secret`` reads it from.
SECRET_ENV = "VERTEBRAE_CACHE_SECRET"
#: Shorter secrets are refused: an HMAC is only as strong as its key is hard to guess.
MIN_SECRET_CHARS = 16
_PREFIX = "hmac-sha256:"
SIGNATURE = re.compile(re.escape(_PREFIX) + r"[0-9a-f]{64}")
#: Separate manifest and plan-file signatures from each other and from any other HMAC made with the same secret.
MANIFEST_DOMAIN = b"vertebrae manifest signature v1\n"
PLAN_DOMAIN = b"vertebrae plan signature v1\n"


def check_secret(owner: str, secret: Any) -> str | None:
    """``None`` or a string of at least :data:`MIN_SECRET_CHARS` characters; the value never enters a message."""
    if secret is None:
        return None
    if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
        what = f"a {type(secret).__name__}" if not isinstance(secret, str) else f"{len(secret)} characters"
        raise ConfigError(f"{owner} must be a string of at least {MIN_SECRET_CHARS} characters (got {what}); "
                          "generate one with: python -c 'import secrets; print(secrets.token_hex(32))'")
    return secret


def secret_from_env() -> str | None:
    """The secret in :data:`SECRET_ENV` (checked), None when it is unset or empty."""
    return check_secret(f"${SECRET_ENV}", os.environ.get(SECRET_ENV) or None)


def canonical(content: Mapping[str, Any]) -> bytes:
    """One byte string per manifest content: sorted keys, no whitespace, ASCII (what the HMAC covers)."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def sign(content: Mapping[str, Any], secret: str, domain: bytes = MANIFEST_DOMAIN) -> str:
    """``hmac-sha256:<hex>`` of the canonical ``content`` (``domain``: what kind of document it signs)."""
    digest = hmac.new(secret.encode("utf-8"), domain + canonical(content), hashlib.sha256).hexdigest()
    return _PREFIX + digest


def check_signature(content: Mapping[str, Any], signature: str | None, secret: str, where: str, *,
                    domain: bytes = MANIFEST_DOMAIN, what: str = "manifest") -> None:
    """Raise :class:`ArtifactSignatureError` unless ``signature`` is ``content``'s under ``secret``."""
    if signature is None:
        raise ArtifactSignatureError(f"{where}: the {what} is unsigned (written without this cache's secret, or "
                                     "forged); it is not read")
    if not isinstance(signature, str) or not hmac.compare_digest(signature, sign(content, secret, domain)):
        raise ArtifactSignatureError(f"{where}: the {what}'s signature does not match its content (forged, "
                                     "edited, or signed with another secret); it is not read")
