"""The Celery app of ``bench.roundtrip``: a no-op task on the same RabbitMQ and Redis.

Celery is not a dependency of brainhands: install it into the venv to get this row
(``.venv/bin/pip install 'celery>=5.3,<6'``). ``bench/roundtrip_celery.py`` runs the worker as

    celery -A bench.roundtrip_celery_app worker --pool prefork --concurrency 2 -Q <queue>

and configures both sides through the environment, read when this module is imported:

* ``BENCH_CELERY_QUEUE``: the queue (and its direct exchange and routing key), unique per run;
* ``BENCH_CELERY_BROKER``: the AMQP URL (default vhost: ``amqp://guest:guest@host:5672//``);
* ``BENCH_CELERY_BACKEND``: the Redis result backend URL;
* ``BENCH_CELERY_PREFIX``: the prefix of every result key in Redis, deleted afterwards.

Settings beyond Celery's defaults: ``task_acks_late`` (ack after the task ran, as Hands ack
after the outcome is recorded), and no remote control or events, so nothing but the run's
queue and exchange is declared on the broker.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench-roundtrip-celery")
BROKER = os.environ.get("BENCH_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
BACKEND = os.environ.get("BENCH_CELERY_BACKEND", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_CELERY_PREFIX", f"{QUEUE}:")

app = Celery("bench_roundtrip", broker=BROKER, backend=BACKEND)
app.conf.update(
    task_default_queue=QUEUE,
    task_default_exchange=QUEUE,
    task_default_routing_key=QUEUE,
    task_acks_late=True,
    result_backend_transport_options={"global_keyprefix": PREFIX},
    result_expires=3600,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.roundtrip.noop")
def noop() -> dict[str, Any]:
    """Do nothing: a round trip costs only what Celery adds."""
    return {}
