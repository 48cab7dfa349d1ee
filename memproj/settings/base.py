"""Settings, all from the environment, each variable read once through
``memproj.settings.environment.read`` (the table that documents it), with the
embedded default when DATABASE_URL / CELERY_BROKER_URL are not given."""

from __future__ import annotations

import os
from pathlib import Path

import environ

from memproj.settings.environment import read

BASE_DIR = Path(__file__).resolve().parent.parent.parent
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# The packaged embedding model must never reach for a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Unset, the signing key is one generated for this install (var/secrets/django-secret-key,
# 0600): nobody else knows it and restarts keep the sessions. That holds only while
# the service is reachable from this machine alone; served to others, the key is set
# on purpose (every host signs with it). The former public default, still in old
# .env files, is refused when served and warned about (memproj.W001) otherwise.
INSECURE_SECRET_KEY = "memproj-dev-insecure-change-me"  # noqa: S105 - public: refused when served, W001 otherwise
SECRET_KEY = read("DJANGO_SECRET_KEY", default="")
DEBUG = read("DJANGO_DEBUG")
ALLOWED_HOSTS = read("DJANGO_ALLOWED_HOSTS")
# Served to others: the web process binds a non-loopback address (MEMPROJ_HOST,
# memproj/serve.py) or answers to a host name that is not this machine's.
_LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1", "testserver"}
MEMPROJ_HOST = read("MEMPROJ_HOST")
MEMPROJ_SERVED_BEYOND_LOOPBACK = MEMPROJ_HOST not in _LOOPBACK or any(host not in _LOOPBACK for host in ALLOWED_HOSTS)
if SECRET_KEY in ("", INSECURE_SECRET_KEY) and MEMPROJ_SERVED_BEYOND_LOOPBACK and not DEBUG:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        ("DJANGO_SECRET_KEY is the former public default" if SECRET_KEY else "DJANGO_SECRET_KEY is not set")
        + ", and the service is reachable from other machines (MEMPROJ_HOST or DJANGO_ALLOWED_HOSTS name more "
        "than this one): set DJANGO_SECRET_KEY to a long random value, the same for every host, e.g. the output of "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'. (A key generated for one install is used "
        "only while the service is reachable from this machine alone.)"
    )
if not SECRET_KEY:
    from memproj.embedded import secret

    SECRET_KEY = secret("django-secret-key")

# HTTPS (off by default: the embedded default serves http://127.0.0.1). MEMPROJ_HTTPS
# turns on secure cookies, the redirect to https and a year of HSTS; each can be
# set on its own. The redirect and HSTS cover the Django routes (admin, /api/);
# the MCP endpoints never redirect. Behind a proxy that terminates TLS, set
# DJANGO_SECURE_PROXY_SSL_HEADER so that Django sees the request as https.
MEMPROJ_HTTPS = read("MEMPROJ_HTTPS")
SESSION_COOKIE_SECURE = read("DJANGO_SESSION_COOKIE_SECURE", default=MEMPROJ_HTTPS)
CSRF_COOKIE_SECURE = read("DJANGO_CSRF_COOKIE_SECURE", default=MEMPROJ_HTTPS)
SECURE_SSL_REDIRECT = read("DJANGO_SECURE_SSL_REDIRECT", default=MEMPROJ_HTTPS)
SECURE_HSTS_SECONDS = read("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000 if MEMPROJ_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = read("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = read("DJANGO_SECURE_HSTS_PRELOAD")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if read("DJANGO_SECURE_PROXY_SSL_HEADER") else None
CSRF_TRUSTED_ORIGINS = read("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "policy",
    "memory",
    "workers",
    # No models: the project's own system checks (memproj/checks.py).
    "memproj.apps.MemprojConfig",
]

MIDDLEWARE = [
    # First, so that it sees every answer: outside the admin, Django's bare
    # error answers (a 405 of require_safe, the CSRF page) become coded JSON.
    "mcp_server.http.coded_errors",
    # Django's own middleware, each run on the event loop outside the admin
    # (memproj/middleware.py): without a thread hop per method and request.
    "memproj.middleware.SecurityMiddleware",
    "memproj.middleware.SessionMiddleware",
    "memproj.middleware.CommonMiddleware",
    "memproj.middleware.CsrfViewMiddleware",
    "memproj.middleware.AuthenticationMiddleware",
    "memproj.middleware.MessageMiddleware",
    "memproj.middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "memproj.urls"
WSGI_APPLICATION = "memproj.wsgi.application"
ASGI_APPLICATION = "memproj.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- Database: DATABASE_URL, else the embedded PostgreSQL + pgvector -------------
# Two roles: DATABASE_URL is the service's role, which must own
# nothing (web, worker, beat, stdio connect as it); DATABASE_OWNER_URL, if
# given, is the role that owns the schema: `manage.py migrate` and the test
# session's database set-up connect as it. Without it the one role does both
# (and the audit log is only as safe as that role is weak). Resolving the
# embedded URLs starts nothing: processes that need the servers start them
# (memproj.embedded.ensure_for_settings).
_database_url = read("DATABASE_URL", default="")
MEMPROJ_EMBEDDED_POSTGRES = not _database_url
if MEMPROJ_EMBEDDED_POSTGRES:
    from memproj import embedded

    DATABASES = {"default": environ.Env.db_url_config(embedded.postgres_url())}
    _owner_url = embedded.postgres_url(embedded.OWNER_ROLE)
else:
    DATABASES = {"default": environ.Env.db_url_config(_database_url)}
    _owner_url = read("DATABASE_OWNER_URL", default="")
# A socket directory given as ?host=/path lands in OPTIONS; keep it in HOST so
# child processes (workers, stdio servers in tests) can rebuild the URL.
if "host" in DATABASES["default"].get("OPTIONS", {}):
    DATABASES["default"]["HOST"] = DATABASES["default"]["OPTIONS"].pop("host")
# Only the credentials differ: the owner connects to the same database.
MEMPROJ_DB_OWNER: dict[str, str] = {}
if _owner_url:
    _owner = environ.Env.db_url_config(_owner_url)
    MEMPROJ_DB_OWNER = {"USER": _owner.get("USER", ""), "PASSWORD": _owner.get("PASSWORD", "")}
# The audit chain's HMAC key (memory/services/events.py); never sent to the
# database. Empty: a key generated once in var/secrets/audit.key (0600).
MEMPROJ_AUDIT_KEY = read("MEMPROJ_AUDIT_KEY", default="")
DATABASES["default"].setdefault("CONN_MAX_AGE", read("DB_CONN_MAX_AGE"))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Django's backend with a health check that reads the socket instead of sending SELECT 1.
DATABASES["default"]["ENGINE"] = "memproj.postgres"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# The admin login lockout (policy/loginlock.py) refuses a locked login before
# ModelBackend checks its password.
AUTHENTICATION_BACKENDS = [
    "policy.loginlock.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
MEMPROJ_ADMIN_LOGIN_LOCKOUT = {
    "FAILURES": read("MEMPROJ_ADMIN_LOGIN_FAILURES"),
    "ADDRESS_FAILURES": read("MEMPROJ_ADMIN_LOGIN_ADDRESS_FAILURES"),
    "WINDOW_SECONDS": read("MEMPROJ_ADMIN_LOGIN_WINDOW"),
    "LOCKOUT_SECONDS": read("MEMPROJ_ADMIN_LOGIN_LOCKOUT"),
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": read("LOG_LEVEL")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- Celery: CELERY_BROKER_URL, else the embedded Redis ------------------------------
_broker_url = read("CELERY_BROKER_URL", default="")
MEMPROJ_EMBEDDED_REDIS = not _broker_url
if MEMPROJ_EMBEDDED_REDIS:
    from memproj import embedded

    CELERY_BROKER_URL = embedded.redis_url()
else:
    CELERY_BROKER_URL = _broker_url
CELERY_RESULT_BACKEND = read("CELERY_RESULT_BACKEND") or None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
# Tasks are idempotent (safe to run twice), so acknowledge after the work is done:
# a worker killed mid-task has its message redelivered instead of lost.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
_BROKER_SOCKET_TIMEOUT = read("CELERY_BROKER_SOCKET_TIMEOUT")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": read("CELERY_VISIBILITY_TIMEOUT"),
    # Without these a publish to a broker that stops answering without closing
    # the connection waits for ever (kombu's Redis transport defaults to None):
    # a write's after-commit enqueue would hold its answer, and a sweep that
    # re-enqueues itself would hold the worker.
    "socket_timeout": _BROKER_SOCKET_TIMEOUT,
    "socket_connect_timeout": _BROKER_SOCKET_TIMEOUT,
    # One connection attempt where a caller gave no retry policy of its own: a
    # write's after-commit enqueue (retry=False) would otherwise retry a refused
    # broker for kombu's connection timeout, sleeping between attempts, and every
    # write would answer seconds late while the broker is down; its outbox row
    # is what gets the follow-up done. Publishes with a retry policy (beat's, a
    # sweep re-enqueueing itself) and the worker's consumer, which passes its own
    # limit (broker_connection_max_retries), keep theirs.
    "max_retries": 0,
}
CELERY_TASK_ALWAYS_EAGER = read("CELERY_TASK_ALWAYS_EAGER")
CELERY_TASK_EAGER_PROPAGATES = True

# --- memproj ---------------------------------------------------------------------------
MEMPROJ = {
    "EMBED_MODE": read("MEMPROJ_EMBED_MODE"),  # sync | async
    "EMBEDDER": read("MEMPROJ_EMBEDDER"),  # local | openai
    "EMBEDDING_MODEL": read("MEMPROJ_EMBEDDING_MODEL"),
    "EMBEDDING_DIM": 384,
    # What is embedded for an episode (memory/embedtext.py). Recorded per memory
    # (embedding_model "<model>+ctx1"), so a change re-embeds.
    "EMBED_TEXT": read("MEMPROJ_EMBED_TEXT"),
    "EMBEDDING_API_BASE": read("MEMPROJ_EMBEDDING_API_BASE"),
    "EMBEDDING_API_KEY": read("MEMPROJ_EMBEDDING_API_KEY"),
    "CONTEXT_TOKEN_BUDGET": read("MEMPROJ_CONTEXT_TOKEN_BUDGET"),
    # Share of the context budget each section may take (facts, rules, episodes).
    "CONTEXT_QUOTAS": {
        "facts": read("MEMPROJ_CONTEXT_QUOTA_FACTS"),
        "rules": read("MEMPROJ_CONTEXT_QUOTA_RULES"),
        "episodes": read("MEMPROJ_CONTEXT_QUOTA_EPISODES"),
    },
    # Hybrid fusion and keyword scorer (memory/scoring.py RetrievalParams; chosen on
    # retrieval benchmarks, docs/benchmarks.md). A tenant policy's retrieval.hybrid
    # values (alpha, k_vec, k_txt) override per tenant.
    "FUSION": read("MEMPROJ_FUSION"),  # conf | adaptive | rrf (memory/scoring.py FUSIONS)
    "FUSION_CONF_GAIN": read("MEMPROJ_FUSION_CONF_GAIN"),
    "KEYWORD_SCORER": read("MEMPROJ_KEYWORD_SCORER"),  # bm25 | cover_density
    "FUSION_ALPHA": read("MEMPROJ_FUSION_ALPHA"),
    # Time-aware ranking (memory/temporal.py): weight of a memory's fit to a period the
    # query names ("last week", "in May"), after fusion; 0 turns it off.
    "TIME_BOOST": read("MEMPROJ_TIME_BOOST"),
    "MAX_CONTENT_CHARS": read("MEMPROJ_MAX_CONTENT_CHARS"),
    "MAX_QUERY_CHARS": read("MEMPROJ_MAX_QUERY_CHARS"),
    "MAX_TAGS": 32,
    "MAX_TAG_CHARS": 64,
    "MAX_LIMIT": 100,
    # pce: how long an active context (a ranked snapshot a cursor pages through)
    # lives; the active-contexts-expire beat sweep deletes it afterwards.
    "ACTIVE_CONTEXT_TTL_SECONDS": read("MEMPROJ_ACTIVE_CONTEXT_TTL_SECONDS"),
    # Idempotency keys of writes (memory/services/idempotency.py): how long a key
    # replays its answer (the idempotency-keys-expire sweep deletes it afterwards),
    # and how long a duplicate waits for the first request with its key to finish
    # before it answers a retryable error.
    "IDEMPOTENCY_TTL_SECONDS": read("MEMPROJ_IDEMPOTENCY_TTL_SECONDS"),
    "IDEMPOTENCY_WAIT_SECONDS": read("MEMPROJ_IDEMPOTENCY_WAIT_SECONDS"),
    # Threads (each with its own database connection) that run a request's
    # independent reads side by side (memproj/dbthreads.py); 0 runs them in turn.
    "SIDE_READ_THREADS": read("MEMPROJ_SIDE_READ_THREADS"),
    # The keyword channel's statement prepared per connection (memory/retrieval.py).
    "DB_PREPARED": read("MEMPROJ_DB_PREPARED"),
}

# Embedder runtime (memory/embeddings.py): speed, and bounded waits on a failing embedder.
MEMPROJ_EMBEDDER = {
    # onnx (ONNX Runtime, exported from the packaged weights into var/models) | torch.
    # Both compute the same model and record the same model name.
    "BACKEND": read("MEMPROJ_EMBEDDING_BACKEND"),
    "THREADS": read("MEMPROJ_EMBEDDING_THREADS"),  # 0 = one stream per core
    # fp32 | int8: int8 runs a per-channel INT8 quantized copy of the ONNX graph (about half
    # the CPU per text; vectors cosine ~0.993 with fp32), recorded as "<model>+int8" so a
    # switch is caught up by `manage.py reembed` / the re-embed sweep. Local ONNX only.
    "PRECISION": read("MEMPROJ_EMBEDDER_PRECISION"),
    # Bounded waits on a remote endpoint: a query degrades to keyword, a store is kept pending.
    "QUERY_TIMEOUT_SECONDS": read("MEMPROJ_EMBED_QUERY_TIMEOUT"),
    "STORE_TIMEOUT_SECONDS": read("MEMPROJ_EMBED_STORE_TIMEOUT"),
    "HTTP_TIMEOUT_SECONDS": read("MEMPROJ_EMBED_HTTP_TIMEOUT"),
    # The in-process model queues under CPU overload rather than hanging: a longer wait.
    "LOCAL_TIMEOUT_SECONDS": read("MEMPROJ_EMBED_LOCAL_TIMEOUT"),
    # The first call loads the model (an ONNX export or importing torch).
    "LOAD_TIMEOUT_SECONDS": read("MEMPROJ_EMBED_LOAD_TIMEOUT"),
    # Circuit breaker: open after this many consecutive failures, probe again after the cooldown.
    "BREAKER_FAILURES": read("MEMPROJ_EMBED_BREAKER_FAILURES"),
    "BREAKER_COOLDOWN_SECONDS": read("MEMPROJ_EMBED_BREAKER_COOLDOWN"),
    # Micro-batching of concurrent requests into one forward pass.
    "BATCH_WINDOW_MS": read("MEMPROJ_EMBED_BATCH_WINDOW_MS"),
    "BATCH_MAX": read("MEMPROJ_EMBED_BATCH_MAX"),
    "QUERY_CACHE_SIZE": read("MEMPROJ_EMBED_QUERY_CACHE"),
}
# uvicorn worker processes of the web tier (memproj/serve.py passes --workers).
MEMPROJ_WEB_WORKERS = read("MEMPROJ_WEB_WORKERS")

# The HTTP edge of the web process (memproj/serve.py web(), memproj/httpserver.py,
# memproj/edge.py): what a client can hold before any app or authentication runs.
MEMPROJ_HTTP = {
    # Largest request body of any route; a larger one is refused with 413 before
    # it is read (by Content-Length) or as it streams. /api/ingest alone allows
    # more: its 10 MB document plus the JSON around it (memproj/asgi.py).
    "MAX_BODY_BYTES": read("MEMPROJ_HTTP_MAX_BODY_BYTES"),
    # Seconds a client has to send a whole request line and headers, from the
    # connection's start or the previous response's end (408, or a silent close
    # when nothing was sent).
    "HEADER_TIMEOUT": read("MEMPROJ_HTTP_HEADER_TIMEOUT"),
    # Seconds a client has to send a whole request body, from the end of its
    # headers (a coded 408; once the request is answered, the connection is
    # closed). One deadline for the whole body: trickling it cannot stretch it.
    "BODY_TIMEOUT": read("MEMPROJ_HTTP_BODY_TIMEOUT"),
    # Seconds an idle kept-alive connection stays open (uvicorn timeout_keep_alive).
    "KEEP_ALIVE_TIMEOUT": read("MEMPROJ_HTTP_KEEP_ALIVE_TIMEOUT"),
    # Open connections, or requests in flight, per web process; beyond it a
    # request is answered 503 with Retry-After (uvicorn limit_concurrency; 0 = none).
    "LIMIT_CONCURRENCY": read("MEMPROJ_HTTP_LIMIT_CONCURRENCY"),
    # Largest request line plus headers, in bytes (uvicorn h11_max_incomplete_event_size).
    "MAX_HEADER_BYTES": read("MEMPROJ_HTTP_MAX_HEADER_BYTES"),
    # Connections the kernel queues before the server accepts them.
    "BACKLOG": read("MEMPROJ_HTTP_BACKLOG"),
    # Comma-separated addresses of reverse proxies whose X-Forwarded-For /
    # X-Forwarded-Proto are believed; empty (the default) believes none, so the
    # client address the rate limit counts by cannot be written by a client.
    "FORWARDED_ALLOW_IPS": read("MEMPROJ_FORWARDED_ALLOW_IPS"),
}
# Requests without a valid bearer token (none, unknown, revoked or expired)
# count per source address under this limit (policy/middleware.py); the
# default is the default policy's per-token limit.
MEMPROJ_ANONYMOUS_RATE_LIMIT = {
    "LIMIT": read("MEMPROJ_ANONYMOUS_RATE_LIMIT"),
    "WINDOW_SECONDS": read("MEMPROJ_ANONYMOUS_RATE_WINDOW"),
}

# Public base URL of the HTTP endpoints (OAuth protected-resource metadata) and
# the Host headers the MCP endpoints accept (DNS-rebinding protection).
# The web process's port (memproj/serve.py); MEMPROJ_HOST is read above.
MEMPROJ_PORT = read("PORT")
MEMPROJ_PUBLIC_URL = read("MEMPROJ_PUBLIC_URL") or f"http://127.0.0.1:{MEMPROJ_PORT}"
MEMPROJ_MCP_ALLOWED_HOSTS = read("MEMPROJ_MCP_ALLOWED_HOSTS")
# The rate limiter's Redis (policy/ratelimit.py); empty: the Celery broker's.
MEMPROJ_RATE_LIMIT_REDIS_URL = read("MEMPROJ_RATE_LIMIT_REDIS_URL", default="")

# --- Background pipeline -------------------------------------------------------------------
# A per-deployment queue name lets several deployments (or test runs) share one broker.
CELERY_TASK_DEFAULT_QUEUE = read("CELERY_TASK_DEFAULT_QUEUE")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

MEMPROJ_PIPELINE = {
    # Sweeps: rows per run, and at most this many per tenant per run so one
    # tenant's backlog cannot starve the others.
    "SWEEP_BATCH": read("MEMPROJ_SWEEP_BATCH"),
    "SWEEP_PER_TENANT": read("MEMPROJ_SWEEP_PER_TENANT"),
    # Expired episodes leave retrieval at once; their rows stay for audit this long.
    "EXPIRED_RETENTION_DAYS": read("MEMPROJ_EXPIRED_RETENTION_DAYS"),
    # A pending embedding younger than this is left to the task enqueued at write time.
    "EMBED_RETRY_GRACE_SECONDS": read("MEMPROJ_EMBED_RETRY_GRACE_SECONDS"),
    "EMBED_MAX_ATTEMPTS": read("MEMPROJ_EMBED_MAX_ATTEMPTS"),
    # An open follow-up (outbox row) younger than this is left to the task
    # enqueued after its write; the drain sweep runs the older ones.
    "FOLLOWUP_GRACE_SECONDS": read("MEMPROJ_FOLLOWUP_GRACE_SECONDS"),
    # Semantic conflict check (cosine similarity of all-MiniLM-L6-v2 vectors).
    "NEAR_DUPLICATE_SIMILARITY": read("MEMPROJ_NEAR_DUPLICATE_SIMILARITY"),
    "SAME_SUBJECT_SIMILARITY": read("MEMPROJ_SAME_SUBJECT_SIMILARITY"),
    # memento's store_memory lists earlier memories at or above this cosine
    # similarity as `similar` (tuned on all-MiniLM-L6-v2, docs/dialects/memento.md).
    "SIMILAR_THRESHOLD": read("MEMPROJ_SIMILAR_THRESHOLD"),
    # Consolidation: episodes per tenant per run, tenants per run, cluster shape.
    "CONSOLIDATE_BATCH": read("MEMPROJ_CONSOLIDATE_BATCH"),
    "CONSOLIDATE_TENANTS": read("MEMPROJ_CONSOLIDATE_TENANTS"),
    "CLUSTER_SIMILARITY": read("MEMPROJ_CLUSTER_SIMILARITY"),
    "CLUSTER_MIN_SIZE": read("MEMPROJ_CLUSTER_MIN_SIZE"),
    # An episode that joined no recurring cluster for this long is marked consolidated
    # (considered) so it is not clustered again on every run.
    "CONSOLIDATE_SETTLE_HOURS": read("MEMPROJ_CONSOLIDATE_SETTLE_HOURS"),
    # A consolidation run starts no new tenant after this long (keep it well under
    # CELERY_VISIBILITY_TIMEOUT, or a slow LLM run is redelivered while running).
    "CONSOLIDATE_TIME_BUDGET_SECONDS": read("MEMPROJ_CONSOLIDATE_TIME_BUDGET_SECONDS"),
}

# LLM consolidation: switched on by MEMPROJ_LLM_BASE_URL (any OpenAI-compatible
# chat-completions server: OpenAI, Ollama, vLLM, llama.cpp).
MEMPROJ_LLM_BASE_URL = read("MEMPROJ_LLM_BASE_URL")
MEMPROJ_LLM_MODEL = read("MEMPROJ_LLM_MODEL")
MEMPROJ_LLM_API_KEY = read("MEMPROJ_LLM_API_KEY")
MEMPROJ_LLM_TIMEOUT = read("MEMPROJ_LLM_TIMEOUT")
MEMPROJ_LLM_MAX_ATTEMPTS = read("MEMPROJ_LLM_MAX_ATTEMPTS")
MEMPROJ_CONSOLIDATOR = read("MEMPROJ_CONSOLIDATOR", default="llm" if MEMPROJ_LLM_BASE_URL else "offline")

from workers.schedule import beat_schedule  # noqa: E402  (the one beat table lives with the tasks)

CELERY_BEAT_SCHEDULE = beat_schedule()
# How often a worker looks for messages whose worker died before acknowledging them
# (redelivered once older than visibility_timeout). Lower both with a short timeout.
CELERY_BROKER_TRANSPORT_OPTIONS.update(
    {
        "unacked_restore_interval": read("CELERY_UNACKED_RESTORE_INTERVAL"),
        "unacked_restore_throttle": read("CELERY_UNACKED_RESTORE_THROTTLE"),
    }
)
# Optional prefix for every broker key, so several deployments (or test runs) can
# share one Redis database without seeing each other's queues or unacked messages.
_broker_key_prefix = read("CELERY_BROKER_KEY_PREFIX")
if _broker_key_prefix:
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = _broker_key_prefix

# The role the service connects as (memproj/dbroles.py grants it what it needs).
MEMPROJ_DB_APP_USER = DATABASES["default"].get("USER", "")

# Per-tool timeouts (pce-memory's, for every dialect) are multiplied by this; tests on a shared,
# loaded machine raise it so that a slow CPU is not mistaken for a hung call.
MEMPROJ_TOOL_TIMEOUT_SCALE = read("MEMPROJ_TOOL_TIMEOUT_SCALE")
