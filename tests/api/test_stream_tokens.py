"""Stream tokens as values: what a token carries, and what makes one worthless."""

from __future__ import annotations

import time

from brainhands.api.stream_tokens import StreamTokens


def test_a_token_carries_its_key_and_session_until_it_expires() -> None:
    tokens = StreamTokens(b"secret")
    token, expires_at = tokens.mint("k1", "s1", ttl=60)
    claims = tokens.read(token)
    assert claims is not None and (claims.key_id, claims.session_id) == ("k1", "s1")
    assert abs(claims.expires_at - expires_at) < 0.01 and expires_at > time.time() + 59
    short, _ = tokens.mint("k1", None, ttl=1)
    assert tokens.read(short) is not None
    time.sleep(1.1)
    assert tokens.read(short) is None  # expired


def test_a_token_altered_or_signed_elsewhere_reads_as_nothing() -> None:
    tokens = StreamTokens(b"secret")
    token, _ = tokens.mint("k1", "s1", ttl=60)
    body, _, signature = token.partition(".")
    forged_body = StreamTokens(b"secret").mint("k2", None, ttl=60)[0].partition(".")[0]
    for bad in (
        f"{forged_body}.{signature}",  # claims swapped under the old signature
        f"{body}.{signature[:-1]}A" if signature[-1] != "A" else f"{body}.{signature[:-1]}B",
        StreamTokens(b"another").mint("k1", "s1", ttl=60)[0],  # another API's secret
        token.removeprefix("bhs_"),
        "bhs_nothing",
        "bhs_abc.é",  # a signature that is no ASCII: nothing, not an error
        f"{body}.{signature}é",
        "bhs_é.abc",
        "",
    ):
        assert tokens.read(bad) is None, bad
