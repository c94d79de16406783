"""The Celery app of ``bench.roundtrip``: a no-op task on the same RabbitMQ and Redis.

Celery is not a dependency of brainhands: install it into the venv to get these rows
(``.venv/bin/pip install 'celery>=5.3,<6'``). ``bench/roundtrip_celery.py`` runs the worker as

    celery -A bench.roundtrip_celery_app worker --pool prefork --concurrency 2 -Q <queue>

and configures it through the environment, read when this module is imported:

* ``BENCH_CELERY_QUEUE``: the queue (and its direct exchange and routing key), unique per run;
* ``BENCH_CELERY_BROKER``: the AMQP URL (default vhost: ``amqp://guest:guest@host:5672//``);
* ``BENCH_CELERY_BACKEND``: the Redis result backend URL;
* ``BENCH_CELERY_PREFIX``: the prefix of every result key in Redis, deleted afterwards;
* ``BENCH_CELERY_DURABLE``: ``1`` for the durable variant (below).

The client side builds the same app with ``create_app``.

Settings beyond Celery's defaults: ``task_acks_late`` (ack after the task ran, as Hands ack
after the outcome is recorded), and no remote control or events, so nothing but the run's
queue and exchange is declared on the broker. The durable variant also does what brainhands
does with every message: a quorum queue and publisher confirms (Celery's messages are
persistent by default). Its results still live in Redis only. Its worker runs without the
native delayed delivery Celery sets up beside quorum queues (28 queues and exchanges of
fixed names, shared with any other Celery on the broker): the no-op task is never delayed.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.worker.consumer import Consumer
from kombu import Exchange, Queue

NOOP = "bench.roundtrip.noop"


def noop() -> dict[str, Any]:
    """Do nothing: a round trip costs only what Celery adds."""
    return {}


class NoDelayConsumer(Consumer):
    """Celery's worker consumer without its native delayed delivery step."""

    class Blueprint(Consumer.Blueprint):
        default_steps = tuple(
            s for s in Consumer.Blueprint.default_steps if "delayed_delivery" not in s
        )


def create_app(queue: str, broker: str, backend: str, prefix: str, durable: bool) -> Celery:
    app = Celery("bench_roundtrip", broker=broker, backend=backend)
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_acks_late=True,
        result_backend_transport_options={"global_keyprefix": prefix},
        result_expires=3600,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
    )
    if durable:
        app.conf.update(
            task_queues=[
                Queue(
                    queue,
                    Exchange(queue, type="direct"),
                    routing_key=queue,
                    queue_arguments={"x-queue-type": "quorum"},
                )
            ],
            broker_transport_options={"confirm_publish": True},
            worker_consumer=f"{__name__}:NoDelayConsumer",
        )
    app.task(name=NOOP)(noop)
    return app


QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench-roundtrip-celery")
app = create_app(
    QUEUE,
    os.environ.get("BENCH_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
    os.environ.get("BENCH_CELERY_BACKEND", "redis://127.0.0.1:6379/0"),
    os.environ.get("BENCH_CELERY_PREFIX", f"{QUEUE}:"),
    os.environ.get("BENCH_CELERY_DURABLE") == "1",
)
