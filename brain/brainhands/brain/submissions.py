"""A session's submissions: the next one started, cancel requests carried out.

A session runs one submission's root task at a time; later submissions wait for their turn
(or join the running one as follow-ups, ``brain.decide``). A pass starts the oldest waiting
one when no root task is open, and carries out the inbox's cancel requests first, so that a
submission cancelled before its turn never starts.
"""

from __future__ import annotations

import logging

from brainhands.brain.edits import SessionEdits
from brainhands.shared.store import Draft, SessionState

log = logging.getLogger("brainhands.brain")


def start_next_submission(edits: SessionEdits, draft: Draft) -> bool:
    """Start the oldest submission waiting for its turn, if no root task is open: a
    session runs one submission's task at a time (later ones wait, or join it as
    follow-ups)."""
    if not edits.queued or any(t.parent_id is None for t in edits.open_tasks()):
        return False
    submission = edits.queued.pop(0)
    try:
        child = edits.start_submission(submission)
        root = edits.spawn(draft, child, parent=None, submission_id=submission.id)
    except Exception as exc:  # bad input is the submitter's problem, reported to it
        draft.update_submission(submission.id, status="failed", error=str(exc))
        edits.root_ended = True  # the next one may start
        return True
    draft.update_submission(submission.id, status="running", task_id=root)
    return True


def carry_out_cancels(edits: SessionEdits, draft: Draft, state: SessionState) -> set[str]:
    """Carry out the inbox's cancel requests in ``draft`` (each marked applied in it);
    return the request ids of the queued submissions they end before they start.

    A running submission's root task gets ``cancel_requested`` (the kernel winds it
    down); one that has not started ends ``cancelled``; one already ended, or unknown,
    leaves the request applied with nothing to do.
    """
    ended: set[str] = set()
    by_request = {s.request_id: s for s in state.open_submissions}
    for request in state.inbox:
        if request.kind != "cancel":
            continue  # a kind this build does not know: left for one that does
        draft.mark_applied(request.id)
        submission = by_request.get(request.key)
        if submission is None:
            continue
        # A follow-up that joined a loop is that loop's (its text shapes the work now).
        root = next(
            (
                t
                for t in edits.open_tasks()
                if t.submission_id == submission.id or t.id == submission.task_id
            ),
            None,
        )
        if root is None:
            draft.update_submission(submission.id, status="cancelled", error="cancelled")
            ended.add(submission.request_id)
        elif not root.cancel_requested:
            edits.update(draft, root, cancel_requested=True)
        log.info(
            "cancel requested",
            extra={
                "event": "cancel_requested",
                "session_id": edits.session_id,
                "request_id": request.key,
                "started": root is not None,
            },
        )
    return ended
