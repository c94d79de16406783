"""Four eyes: whoever asked for a run does not decide for it.

With four eyes on (the API's ``BRAINHANDS_API_FOUR_EYES``), every act that decides for a
session -- an approval's approve or deny, a signal declared a decision, a raise of a run's
budget, a retry or an abandon of a failed undo -- is refused to a principal that submitted
to that session: the one check, made by every act before it is sent.
"""

from __future__ import annotations

from brainhands.shared.errors import DecisionRefused
from brainhands.shared.store import Store


async def check_four_eyes(store: Store, session_id: str, principal: str, act: str) -> None:
    """``DecisionRefused`` when ``principal`` submitted to the session of store key
    ``session_id``: ``act`` (what it asked to do, for the message) needs another's eyes."""
    if await store.submissions.submitted_by(session_id, principal):
        raise DecisionRefused(
            f"{act}: {principal} submitted to this session, and a decision for a run is "
            "made by someone other than who asked for it (four eyes)"
        )
