"""How a consumer settles a delivery: decided in one place, applied in one place.

Every consumer ends a delivery the same way (dramatiq's ``post_process_message``): it says
what its handling ended with, ``judge_delivery`` decides from that alone, and ``settle``
does it. The rules:

- handled (``None``): the work is durable, or it is no business of this consumer: ack;
- superseded (``StaleLeaseError``): a newer holder of the lease does the work: ack;
- a message with no place here (``InvalidMessage``, see ``misplaced``): park it with the
  reason, so an operator can see it;
- the lease lost mid-work (``LeaseLost``) or any other failure: requeue, so it is tried
  again; a requeue counts against the queue's delivery limit, which parks a poison message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from brainhands.shared.broker import Broker
from brainhands.shared.delivery import Delivery
from brainhands.shared.errors import InvalidMessage, StaleLeaseError
from brainhands.shared.messages import Message

SettleAction = Literal["ack", "requeue", "park"]


@dataclass(frozen=True)
class Settlement:
    """What to do with a delivery: ``ack`` it (it leaves the queue), ``requeue`` it (it
    comes back, counted as a failed delivery) or ``park`` it, saying why (``reason``)."""

    action: SettleAction
    reason: str = ""


def judge_delivery(ended: BaseException | None) -> Settlement:
    """How to settle a delivery whose handling ended with ``ended`` (``None``: handled)."""
    if ended is None or isinstance(ended, StaleLeaseError):
        return Settlement("ack")
    if isinstance(ended, InvalidMessage):
        return Settlement("park", str(ended))
    return Settlement("requeue")


def misplaced(message: Message) -> InvalidMessage:
    """What a consumer ends with when given a valid message of a type it does not take."""
    return InvalidMessage(f"a {message.type} message has no place here")


async def settle(broker: Broker, delivery: Delivery, settlement: Settlement) -> None:
    """Apply ``settlement`` to ``delivery`` (``broker`` parks it)."""
    if settlement.action == "park":
        await broker.park(delivery, settlement.reason)
    elif settlement.action == "requeue":
        await delivery.reject(requeue=True)
    else:
        await delivery.ack()
