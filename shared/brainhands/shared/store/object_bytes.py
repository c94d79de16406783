"""An object store for workspace objects' bytes (``BRAINHANDS_WORKSPACE_OBJECTS``).

By default a workspace object's bytes are a column of its row (``workspace_object.data``).
With an object store configured (``s3://bucket/prefix``, ``gs://...``, ``az://...``, or
``file:///path`` for a shared volume) the row keeps where its bytes are instead: the store
still says which objects exist and which versions name them, and the object store holds
what they are. Credentials and endpoints come as that store's own settings do
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ...), read by ``obstore``,
an extra (``brainhands[object-store]``).

Each upload goes under a key of its own (``<tenant>/<hash>/<token>``), never over another:
a collection deletes the key its row named, so a writer that uploads the same content again
after the row was deleted writes a new key, which no collection of the old row can take.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any

from brainhands.shared.config import OBJECT_STORE_SCHEMES
from brainhands.shared.errors import ConfigurationError

_AT_ONCE = 32
"""Objects read or written at the same time."""


class ObjectBytes:
    """The object store at ``url``, holding workspace objects' bytes."""

    def __init__(self, url: str) -> None:
        scheme = url.partition("://")[0].lower()
        if "://" not in url or scheme not in OBJECT_STORE_SCHEMES:
            raise ValueError(
                f"{url!r} is not an object store's URL: "
                f"{', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}..."
            )
        try:
            from obstore.store import from_url
        except ImportError:
            raise ConfigurationError(
                "an object store for workspaces needs obstore: pip install "
                "'brainhands[object-store]'"
            ) from None
        options: dict[str, Any] = {"mkdir": True} if scheme == "file" else {}
        self.url = url
        self._store = from_url(url, **options)
        self._slots = asyncio.Semaphore(_AT_ONCE)

    @staticmethod
    def new_key(tenant: str, hash_: str) -> str:
        """Where an upload of the tenant's object ``hash_`` goes: a key no other upload has."""
        return f"{tenant}/{hash_}/{uuid.uuid4().hex}"

    async def put(self, objects: dict[str, bytes]) -> None:
        """Upload ``objects`` (by key)."""
        import obstore

        async def one(key: str, data: bytes) -> None:
            async with self._slots:
                await obstore.put_async(self._store, key, data)

        await asyncio.gather(*(one(k, d) for k, d in objects.items()))

    async def get(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The bytes at ``keys``."""
        import obstore

        async def one(key: str) -> tuple[str, bytes]:
            async with self._slots:
                found = await obstore.get_async(self._store, key)
                return key, bytes(await found.bytes_async())

        return dict(await asyncio.gather(*(one(k) for k in keys)))

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete the objects at ``keys`` (one already gone is no error)."""
        import obstore

        batch = list(keys)
        for i in range(0, len(batch), 1000):
            await obstore.delete_async(self._store, batch[i : i + 1000])


def object_store_at(url: str | None, setting: str) -> ObjectBytes | None:
    """The object store ``url`` names (None: none, bytes in the store's rows), or a
    ``ConfigurationError`` naming ``setting``."""
    if not url:
        return None
    try:
        return ObjectBytes(url)
    except Exception as exc:  # ours, or obstore's own (a bucket's name, an option)
        said = str(exc).strip().splitlines() or [type(exc).__name__]
        raise ConfigurationError(f"{setting}: {said[0]}") from None  # not its debug dump
