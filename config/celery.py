from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready

from .broker import register as register_embedded_broker

register_embedded_broker()  # `filesystem://` writes its files atomically (config/broker.py)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("checkpoint_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def serve_metrics(**kwargs: Any) -> None:
    """In the worker's main process, once it is up: its metrics on WORKER_METRICS_PORT (0: none)."""
    from django.conf import settings

    if settings.WORKER_METRICS_PORT:
        from .metrics import serve_worker_metrics  # needs the apps loaded, which they are by now

        serve_worker_metrics(settings.WORKER_METRICS_PORT)
