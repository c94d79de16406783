"""Stream tokens: what a browser's plain ``EventSource`` shows instead of a key.

``EventSource`` sends no ``Authorization`` header, so a page that holds a key mints a token
(``POST /stream-tokens``) and opens ``/sessions/{id}/events?token=...``. A token is short
lived (``ttl``, 5 minutes by default, an hour at most), reads and does nothing else, may be
bound to one session, and dies with its key: a revoked key's tokens stop working as the key
does. It reads ``bhs_<claims>.<signature>``, the claims signed with HMAC-SHA256 under the
API's ``BRAINHANDS_API_TOKEN_SECRET`` (every API replica needs the same secret to accept
the others' tokens; without one, each process makes its own and accepts only its own).
A token sits in a URL, and so in proxies' logs: hence the short life and the read scope.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

PREFIX = "bhs_"
TTL_DEFAULT = 300
TTL_MAX = 3600


@dataclass(frozen=True)
class StreamClaims:
    key_id: str
    session_id: str | None
    """The one session whose stream it opens; None: any of the key's tenant's, and the list."""
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def mint(self, key_id: str, session_id: str | None, ttl: int) -> tuple[str, float]:
        """A token for ``key_id`` (and ``session_id``) good for ``ttl`` seconds; and when it
        expires."""
        expires_at = time.time() + ttl
        claims = {"k": key_id, "s": session_id, "e": round(expires_at, 3)}
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{PREFIX}{body}.{self._sign(body)}", expires_at

    def read(self, token: str) -> StreamClaims | None:
        """The claims of a token this API signed and that has not expired; None otherwise."""
        body, dot, signature = token.removeprefix(PREFIX).partition(".")
        if not token.startswith(PREFIX) or not dot:
            return None
        # Compared as bytes: a signature is a client's text, and may be anything.
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        try:
            claims = json.loads(_unb64(body))
            found = StreamClaims(str(claims["k"]), claims["s"], float(claims["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return found if found.expires_at > time.time() else None

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())
