"""Test settings: everything from base, Celery eager unless a test runs a real worker."""

from memproj.settings.base import *  # noqa: F403

CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Parallel test runs (several checkouts or a CI pass against another broker)
# each get their own test database on the shared server.
_suffix = read("MEMPROJ_TEST_DB_SUFFIX")  # noqa: F405
DATABASES["default"]["TEST"] = {"NAME": f"test_memproj{'_' + _suffix if _suffix else ''}"}  # noqa: F405
# Tool calls run in worker threads; close their connections after each call so
# the test database can be dropped at the end.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
MEMPROJ_TOOL_TIMEOUT_SCALE = 10.0
# Transactional tests flush the database between tests, audit log included
# (policy/management/commands/flush.py); no other settings allow that.
MEMPROJ_FLUSH_AUDIT_LOG = True
