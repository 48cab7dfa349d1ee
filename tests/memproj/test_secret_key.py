"""DJANGO_SECRET_KEY: unset, a key generated for this install while the
service is reachable from this machine only, and a refusal to start once it is
served to others; the former public default, a system-check warning. HTTPS
settings from the environment, off by default. Each case in a fresh process,
with the settings read from its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET_ENV = (
    "DJANGO_SECRET_KEY",
    "MEMPROJ_VAR_DIR",
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


KEY = "from django.conf import settings as s; print(s.SECRET_KEY)"
OWN_KEY = "a-key-of-this-deployment-" + "x" * 40


def test_an_unset_key_is_generated_once_for_this_install(tmp_path):
    first = _run(f"{CHECK}; {KEY}", MEMPROJ_VAR_DIR=str(tmp_path))
    assert first.returncode == 0, first.stderr
    checks, key = first.stdout.split("\n")[:2]
    stored = tmp_path / "secrets" / "django-secret-key"
    assert key == stored.read_text().strip() and len(key) >= 64
    assert stored.stat().st_mode & 0o777 == 0o600
    assert checks == "[]", "a generated key needs no warning"
    again = _run(KEY, MEMPROJ_VAR_DIR=str(tmp_path))
    assert again.stdout.strip() == key, "every process and restart of the install signs with the same key"
    elsewhere = _run(KEY, MEMPROJ_VAR_DIR=str(tmp_path / "another-install"))
    assert elsewhere.stdout.strip() != key


def test_the_former_public_default_is_a_system_check_warning(tmp_path):
    public = _run(CHECK, DJANGO_SECRET_KEY="memproj-dev-insecure-change-me", MEMPROJ_VAR_DIR=str(tmp_path))
    assert public.returncode == 0, public.stderr
    assert "memproj.W001" in public.stdout
    own = _run(CHECK, DJANGO_SECRET_KEY=OWN_KEY, MEMPROJ_VAR_DIR=str(tmp_path))
    assert own.returncode == 0 and "memproj.W001" not in own.stdout


def test_a_key_must_be_set_when_the_service_is_served_to_others(tmp_path):
    for env in ({"DJANGO_ALLOWED_HOSTS": "memory.example.com"}, {"MEMPROJ_HOST": "0.0.0.0"}):  # noqa: S104
        for unset_or_public in ({}, {"DJANGO_SECRET_KEY": "memproj-dev-insecure-change-me"}):
            refused = _run(SECURITY, MEMPROJ_VAR_DIR=str(tmp_path), **env, **unset_or_public)
            assert refused.returncode != 0, (env, unset_or_public)
            assert "ImproperlyConfigured" in refused.stderr and "DJANGO_SECRET_KEY" in refused.stderr
        served = _run(SECURITY, DJANGO_SECRET_KEY=OWN_KEY, MEMPROJ_VAR_DIR=str(tmp_path), **env)
        assert served.returncode == 0, served.stderr
    assert not (tmp_path / "secrets" / "django-secret-key").exists()


def test_https_settings_come_from_the_environment_and_are_off_by_default():
    assert _run(SECURITY).stdout.split() == ["False", "False", "False", "0"]
    on = _run(SECURITY, MEMPROJ_HTTPS="true")
    assert on.stdout.split() == ["True", "True", "True", "31536000"]
    one = _run(SECURITY, DJANGO_SESSION_COOKIE_SECURE="true", DJANGO_SECURE_HSTS_SECONDS="600")
    assert one.stdout.split() == ["True", "False", "False", "600"]
