import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")

app = Celery("memproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
