"""The public default DJANGO_SECRET_KEY: a system-check warning while the
service is reachable from this machine only, a refusal to start once it is
served to others; HTTPS settings from the environment, off by default. Each
case in a fresh process, with the settings read from its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET_ENV = (
    "DJANGO_SECRET_KEY",
    "DJANGO_ALLOWED_HOSTS",
    "MEMPROJ_HOST",
    "DJANGO_DEBUG",
    "MEMPROJ_HTTPS",
    "DJANGO_SECURE_HSTS_SECONDS",
    "DJANGO_SESSION_COOKIE_SECURE",
)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(base, DJANGO_SETTINGS_MODULE="memproj.settings.base", PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


CHECK = (
    "import django; django.setup(); from django.core import checks; "
    "print(sorted(m.id for m in checks.run_checks(tags=['security'])))"
)
SECURITY = (
    "from django.conf import settings as s; "
    "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS)"
)


def test_the_public_default_key_is_a_system_check_warning():
    local = _run(CHECK)
    assert local.returncode == 0, local.stderr
    assert "memproj.W001" in local.stdout
    own = _run(CHECK, DJANGO_SECRET_KEY="a-key-of-this-deployment-" + "x" * 40)
    assert own.returncode == 0 and "memproj.W001" not in own.stdout


def test_the_public_default_key_is_refused_when_the_service_is_served_to_others():
    for env in ({"DJANGO_ALLOWED_HOSTS": "memory.example.com"}, {"MEMPROJ_HOST": "0.0.0.0"}):  # noqa: S104
        refused = _run(SECURITY, **env)
        assert refused.returncode != 0, env
        assert "ImproperlyConfigured" in refused.stderr and "DJANGO_SECRET_KEY" in refused.stderr
        served = _run(SECURITY, DJANGO_SECRET_KEY="a-key-of-this-deployment-" + "x" * 40, **env)
        assert served.returncode == 0, served.stderr


def test_https_settings_come_from_the_environment_and_are_off_by_default():
    assert _run(SECURITY).stdout.split() == ["False", "False", "False", "0"]
    on = _run(SECURITY, MEMPROJ_HTTPS="true")
    assert on.stdout.split() == ["True", "True", "True", "31536000"]
    one = _run(SECURITY, DJANGO_SESSION_COOKIE_SECURE="true", DJANGO_SECURE_HSTS_SECONDS="600")
    assert one.stdout.split() == ["True", "False", "False", "600"]
