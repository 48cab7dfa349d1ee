import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, celeryd_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")

app = Celery("memproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@celeryd_init.connect
@beat_init.connect
def _start_embedded_servers(**_: Any) -> None:
    """A worker or beat process needs the database and the broker; importing
    this module (every Django process does) starts nothing."""
    from memproj.embedded import ensure_for_settings

    ensure_for_settings()
