"""How a consumer settles a delivery: decided in one place, applied in one place.

Every consumer ends a delivery the same way (dramatiq's ``post_process_message``): it says
what its handling ended with, ``judge_delivery`` decides from that alone, and ``settle``
does it. The rules:

- handled (``None``): the work is durable, or it is no business of this consumer: ack;
- superseded (``StaleLeaseError``): a newer holder of the lease does the work: ack;
- a message with no place here (``InvalidMessage``, see ``misplaced``): park it with the
  reason, so an operator can see it;
- the store, Redis or RabbitMQ did not answer (``outage``): nothing is wrong with the
  message, so hold it -- the consumer runs it again once they answer (``Consumer``), which
  costs none of its deliveries: an outage longer than a few redeliveries does not park
  every message that met it;
- the lease lost mid-work (``LeaseLost``) or any other failure: requeue, so it is tried
  again; a requeue counts against the queue's delivery limit, which parks a poison message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from brainhands.shared.delivery import Delivery, Park
from brainhands.shared.errors import BrainhandsError, InvalidMessage, StaleLeaseError, ToolError
from brainhands.shared.messages import Message

SettleAction = Literal["ack", "requeue", "park", "hold"]


@dataclass(frozen=True)
class Settlement:
    """What to do with a delivery: ``ack`` it (it leaves the queue), ``requeue`` it (it
    comes back, counted as a failed delivery), ``park`` it, saying why (``reason``), or
    ``hold`` it unsettled to run it again once the service that failed answers."""

    action: SettleAction
    reason: str = ""


def judge_delivery(ended: BaseException | None) -> Settlement:
    """How to settle a delivery whose handling ended with ``ended`` (``None``: handled)."""
    if ended is None or isinstance(ended, StaleLeaseError):
        return Settlement("ack")
    if isinstance(ended, InvalidMessage):
        return Settlement("park", str(ended))
    if outage(ended):
        return Settlement("hold", str(ended))
    return Settlement("requeue")


def outage(ended: BaseException) -> bool:
    """Whether ``ended`` says a service did not answer (the store, Redis, RabbitMQ), as
    opposed to something wrong with the work: a tool's own errors are the tool's."""
    return (
        isinstance(ended, BrainhandsError) and ended.retryable and not isinstance(ended, ToolError)
    )


def misplaced(message: Message) -> InvalidMessage:
    """What a consumer ends with when given a valid message of a type it does not take."""
    return InvalidMessage(f"a {message.type} message has no place here")


async def settle(park: Park, delivery: Delivery, settlement: Settlement) -> None:
    """Apply ``settlement`` to ``delivery`` (``park``: ``Broker.park``). A delivery held is
    left unsettled: its consumer runs it again."""
    if settlement.action == "park":
        await park(delivery, settlement.reason)
    elif settlement.action == "requeue":
        await delivery.reject(requeue=True)
    elif settlement.action == "ack":
        await delivery.ack()
