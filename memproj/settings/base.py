"""Settings, all from the environment (one ``env``), with the embedded default
when DATABASE_URL / CELERY_BROKER_URL are not given."""

from __future__ import annotations

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# The packaged embedding model must never reach for a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The default key is public (it is in this file): anyone can forge sessions and
# CSRF tokens signed with it. Tolerated, with a loud warning (the memproj.W001
# system check, and the web process's log), only while the service is reachable
# from this machine alone; refused once it is served to others (below).
INSECURE_SECRET_KEY = "memproj-dev-insecure-change-me"  # noqa: S105 - public by design, refused when served
SECRET_KEY = env("DJANGO_SECRET_KEY", default=INSECURE_SECRET_KEY)
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
# Served to others: the web process binds a non-loopback address (MEMPROJ_HOST,
# memproj/serve.py) or answers to a host name that is not this machine's.
_LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1", "testserver"}
MEMPROJ_SERVED_BEYOND_LOOPBACK = env.str("MEMPROJ_HOST", default="127.0.0.1") not in _LOOPBACK or any(
    host not in _LOOPBACK for host in ALLOWED_HOSTS
)
if SECRET_KEY == INSECURE_SECRET_KEY and MEMPROJ_SERVED_BEYOND_LOOPBACK and not DEBUG:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set, and the public default key would let anyone forge admin sessions of a "
        "service reachable from other machines (MEMPROJ_HOST or DJANGO_ALLOWED_HOSTS name more than this one). "
        "Set DJANGO_SECRET_KEY to a long random value, e.g. the output of "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    )

# HTTPS (off by default: the embedded default serves http://127.0.0.1). MEMPROJ_HTTPS
# turns on secure cookies, the redirect to https and a year of HSTS; each can be
# set on its own. The redirect and HSTS cover the Django routes (admin, /api/);
# the MCP endpoints never redirect. Behind a proxy that terminates TLS, set
# DJANGO_SECURE_PROXY_SSL_HEADER so that Django sees the request as https.
MEMPROJ_HTTPS = env.bool("MEMPROJ_HTTPS", default=False)
SESSION_COOKIE_SECURE = env.bool("DJANGO_SESSION_COOKIE_SECURE", default=MEMPROJ_HTTPS)
CSRF_COOKIE_SECURE = env.bool("DJANGO_CSRF_COOKIE_SECURE", default=MEMPROJ_HTTPS)
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=MEMPROJ_HTTPS)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000 if MEMPROJ_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", default=False) else None
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

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
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
# Two roles (issue 15): DATABASE_URL is the service's role, which must own
# nothing (web, worker, beat, stdio connect as it); DATABASE_OWNER_URL, if
# given, is the role that owns the schema: `manage.py migrate` and the test
# session's database set-up connect as it. Without it the one role does both
# (and the audit log is only as safe as that role is weak). Resolving the
# embedded URLs starts nothing: processes that need the servers start them
# (memproj.embedded.ensure_for_settings).
MEMPROJ_EMBEDDED_POSTGRES = not env.str("DATABASE_URL", default="")
if MEMPROJ_EMBEDDED_POSTGRES:
    from memproj import embedded

    DATABASES = {"default": environ.Env.db_url_config(embedded.postgres_url())}
    _owner_url = embedded.postgres_url(embedded.OWNER_ROLE)
else:
    DATABASES = {"default": env.db("DATABASE_URL")}
    _owner_url = env.str("DATABASE_OWNER_URL", default="")
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
MEMPROJ_AUDIT_KEY = env.str("MEMPROJ_AUDIT_KEY", default="")
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
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
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- Celery: CELERY_BROKER_URL, else the embedded Redis ------------------------------
MEMPROJ_EMBEDDED_REDIS = not env.str("CELERY_BROKER_URL", default="")
if MEMPROJ_EMBEDDED_REDIS:
    from memproj import embedded

    CELERY_BROKER_URL = embedded.redis_url()
else:
    CELERY_BROKER_URL = env.str("CELERY_BROKER_URL")
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
# Tasks are idempotent (CONVENTIONS 5), so acknowledge after the work is done:
# a worker killed mid-task has its message redelivered instead of lost.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=300),
}
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_EAGER_PROPAGATES = True

# --- memproj ---------------------------------------------------------------------------
MEMPROJ = {
    "EMBED_MODE": env.str("MEMPROJ_EMBED_MODE", default="sync"),  # sync | async
    "EMBEDDER": env.str("MEMPROJ_EMBEDDER", default="local"),  # local | openai
    "EMBEDDING_MODEL": env.str("MEMPROJ_EMBEDDING_MODEL", default="all-MiniLM-L6-v2"),
    "EMBEDDING_DIM": 384,
    # What is embedded for an episode (memory/embedtext.py): plain = its content;
    # ctx1 = content + the session's previous turn (measured worse on LongMemEval).
    # Recorded per memory (embedding_model "<model>+ctx1"), so a change re-embeds.
    "EMBED_TEXT": env.str("MEMPROJ_EMBED_TEXT", default="plain"),
    "EMBEDDING_API_BASE": env.str("MEMPROJ_EMBEDDING_API_BASE", default=""),
    "EMBEDDING_API_KEY": env.str("MEMPROJ_EMBEDDING_API_KEY", default=""),
    "CONTEXT_TOKEN_BUDGET": env.int("MEMPROJ_CONTEXT_TOKEN_BUDGET", default=3000),
    # Share of the context budget each section may take (facts, rules, episodes).
    "CONTEXT_QUOTAS": {
        "facts": env.float("MEMPROJ_CONTEXT_QUOTA_FACTS", default=0.5),
        "rules": env.float("MEMPROJ_CONTEXT_QUOTA_RULES", default=0.3),
        "episodes": env.float("MEMPROJ_CONTEXT_QUOTA_EPISODES", default=0.2),
    },
    # Hybrid fusion and keyword scorer (memory/scoring.py RetrievalParams; chosen on
    # MADial-Bench and LongMemEval-S dev, docs/benchmarks.md). A tenant policy's
    # retrieval.hybrid values (alpha, k_vec, k_txt) override per tenant.
    # conf: per-query alpha from the keyword channel's coverage of the query
    # (memory/scoring.py confidence_alpha); MADial +0.010 nDCG@10, LongMemEval +0.029.
    "FUSION": env.str("MEMPROJ_FUSION", default="conf"),  # conf | norm | minmax | dbsf | alpha | rrf
    "FUSION_CONF_GAIN": env.float("MEMPROJ_FUSION_CONF_GAIN", default=2.0),
    "KEYWORD_SCORER": env.str("MEMPROJ_KEYWORD_SCORER", default="bm25"),  # bm25 | cover_density
    "FUSION_ALPHA": env.float("MEMPROJ_FUSION_ALPHA", default=0.7),
    # Time-aware ranking (memory/temporal.py): weight of a memory's fit to a period the
    # query names ("last week", "in May"), after fusion; 0 turns it off. bench/quality.py.
    "TIME_BOOST": env.float("MEMPROJ_TIME_BOOST", default=0.2),
    "MAX_CONTENT_CHARS": env.int("MEMPROJ_MAX_CONTENT_CHARS", default=16_000),
    "MAX_QUERY_CHARS": env.int("MEMPROJ_MAX_QUERY_CHARS", default=2_000),
    "MAX_TAGS": 32,
    "MAX_TAG_CHARS": 64,
    "MAX_LIMIT": 100,
    # pce: how long an active context (a ranked snapshot a cursor pages through)
    # lives; the active-contexts-expire beat sweep deletes it afterwards.
    "ACTIVE_CONTEXT_TTL_SECONDS": env.int("MEMPROJ_ACTIVE_CONTEXT_TTL_SECONDS", default=1800),
    # Idempotency keys of writes (memory/services/idempotency.py): how long a key
    # replays its answer (the idempotency-keys-expire sweep deletes it afterwards),
    # and how long a duplicate waits for the first request with its key to finish
    # before it answers a retryable error.
    "IDEMPOTENCY_TTL_SECONDS": env.int("MEMPROJ_IDEMPOTENCY_TTL_SECONDS", default=24 * 3600),
    "IDEMPOTENCY_WAIT_SECONDS": env.float("MEMPROJ_IDEMPOTENCY_WAIT_SECONDS", default=10.0),
    # Threads (each with its own database connection) that run a request's
    # independent reads side by side (memproj/dbthreads.py); 0 runs them in turn.
    "SIDE_READ_THREADS": env.int("MEMPROJ_SIDE_READ_THREADS", default=4),
}

# Embedder runtime (memory/embeddings.py; issue 13 speed, issue 15 item 4 resilience).
MEMPROJ_EMBEDDER = {
    # onnx (ONNX Runtime, exported from the packaged weights into var/models) | torch.
    # Both compute the same model and record the same model name.
    "BACKEND": env.str("MEMPROJ_EMBEDDING_BACKEND", default="onnx"),
    "THREADS": env.int("MEMPROJ_EMBEDDING_THREADS", default=0),  # 0 = the runtime's default
    # fp32 | int8: int8 runs a per-channel INT8 quantized copy of the ONNX graph (about half
    # the CPU per text; vectors cosine ~0.993 with fp32), recorded as "<model>+int8" so a
    # switch is caught up by `manage.py reembed` / the re-embed sweep. Local ONNX only.
    "PRECISION": env.str("MEMPROJ_EMBEDDER_PRECISION", default="fp32"),
    # Bounded waits on a remote endpoint: a query degrades to keyword, a store is kept pending.
    "QUERY_TIMEOUT_SECONDS": env.float("MEMPROJ_EMBED_QUERY_TIMEOUT", default=2.0),
    "STORE_TIMEOUT_SECONDS": env.float("MEMPROJ_EMBED_STORE_TIMEOUT", default=5.0),
    "HTTP_TIMEOUT_SECONDS": env.float("MEMPROJ_EMBED_HTTP_TIMEOUT", default=10.0),
    # The in-process model queues under CPU overload rather than hanging: a longer wait.
    "LOCAL_TIMEOUT_SECONDS": env.float("MEMPROJ_EMBED_LOCAL_TIMEOUT", default=30.0),
    # The first call loads the model (an ONNX export or importing torch).
    "LOAD_TIMEOUT_SECONDS": env.float("MEMPROJ_EMBED_LOAD_TIMEOUT", default=300.0),
    # Circuit breaker: open after this many consecutive failures, probe again after the cooldown.
    "BREAKER_FAILURES": env.int("MEMPROJ_EMBED_BREAKER_FAILURES", default=3),
    "BREAKER_COOLDOWN_SECONDS": env.float("MEMPROJ_EMBED_BREAKER_COOLDOWN", default=30.0),
    # Micro-batching of concurrent requests into one forward pass.
    "BATCH_WINDOW_MS": env.float("MEMPROJ_EMBED_BATCH_WINDOW_MS", default=2.0),
    "BATCH_MAX": env.int("MEMPROJ_EMBED_BATCH_MAX", default=64),
    "QUERY_CACHE_SIZE": env.int("MEMPROJ_EMBED_QUERY_CACHE", default=512),
}
# uvicorn worker processes of the web tier (memproj/serve.py passes --workers).
MEMPROJ_WEB_WORKERS = env.int("MEMPROJ_WEB_WORKERS", default=1)

# The HTTP edge of the web process (memproj/serve.py web(), memproj/httpserver.py,
# memproj/edge.py): what a client can hold before any app or authentication runs.
MEMPROJ_HTTP = {
    # Largest request body of any route; a larger one is refused with 413 before
    # it is read (by Content-Length) or as it streams. /api/ingest alone allows
    # more: its 10 MB document plus the JSON around it (memproj/asgi.py).
    "MAX_BODY_BYTES": env.int("MEMPROJ_HTTP_MAX_BODY_BYTES", default=2 * 1024 * 1024),
    # Seconds a client has to send a whole request line and headers, from the
    # connection's start or the previous response's end (408, or a silent close
    # when nothing was sent).
    "HEADER_TIMEOUT": env.float("MEMPROJ_HTTP_HEADER_TIMEOUT", default=10.0),
    # Seconds an idle kept-alive connection stays open (uvicorn timeout_keep_alive).
    "KEEP_ALIVE_TIMEOUT": env.int("MEMPROJ_HTTP_KEEP_ALIVE_TIMEOUT", default=5),
    # Open connections, or requests in flight, per web process; beyond it a
    # request is answered 503 with Retry-After (uvicorn limit_concurrency; 0 = none).
    "LIMIT_CONCURRENCY": env.int("MEMPROJ_HTTP_LIMIT_CONCURRENCY", default=512),
    # Largest request line plus headers, in bytes (uvicorn h11_max_incomplete_event_size).
    "MAX_HEADER_BYTES": env.int("MEMPROJ_HTTP_MAX_HEADER_BYTES", default=16 * 1024),
    # Connections the kernel queues before the server accepts them.
    "BACKLOG": env.int("MEMPROJ_HTTP_BACKLOG", default=2048),
    # Comma-separated addresses of reverse proxies whose X-Forwarded-For /
    # X-Forwarded-Proto are believed; empty (the default) believes none, so the
    # client address the rate limit counts by cannot be written by a client.
    "FORWARDED_ALLOW_IPS": env.str("MEMPROJ_FORWARDED_ALLOW_IPS", default=""),
}
# Requests without a valid bearer token (none, unknown, revoked or expired)
# count per source address under this limit (policy/middleware.py); the
# default is the default policy's per-token limit.
MEMPROJ_ANONYMOUS_RATE_LIMIT = {
    "LIMIT": env.int("MEMPROJ_ANONYMOUS_RATE_LIMIT", default=1000),
    "WINDOW_SECONDS": env.int("MEMPROJ_ANONYMOUS_RATE_WINDOW", default=10),
}

# Public base URL of the HTTP endpoints (OAuth protected-resource metadata) and
# the Host headers the MCP endpoints accept (DNS-rebinding protection).
MEMPROJ_PUBLIC_URL = env.str("MEMPROJ_PUBLIC_URL", default="http://127.0.0.1:8000")
MEMPROJ_MCP_ALLOWED_HOSTS = env.list(
    "MEMPROJ_MCP_ALLOWED_HOSTS", default=["127.0.0.1:*", "localhost:*", "[::1]:*", "testserver"]
)

# --- Background pipeline (issue 3) -------------------------------------------------------
# A per-deployment queue name lets several deployments (or test runs) share one broker.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

MEMPROJ_PIPELINE = {
    # Sweeps: rows per run, and at most this many per tenant per run so one
    # tenant's backlog cannot starve the others.
    "SWEEP_BATCH": env.int("MEMPROJ_SWEEP_BATCH", default=500),
    "SWEEP_PER_TENANT": env.int("MEMPROJ_SWEEP_PER_TENANT", default=100),
    # Expired episodes leave retrieval at once; their rows stay for audit this long.
    "EXPIRED_RETENTION_DAYS": env.float("MEMPROJ_EXPIRED_RETENTION_DAYS", default=30.0),
    # A pending embedding younger than this is left to the task enqueued at write time.
    "EMBED_RETRY_GRACE_SECONDS": env.int("MEMPROJ_EMBED_RETRY_GRACE_SECONDS", default=60),
    "EMBED_MAX_ATTEMPTS": env.int("MEMPROJ_EMBED_MAX_ATTEMPTS", default=20),
    # An open follow-up (outbox row) younger than this is left to the task
    # enqueued after its write; the drain sweep runs the older ones.
    "FOLLOWUP_GRACE_SECONDS": env.int("MEMPROJ_FOLLOWUP_GRACE_SECONDS", default=60),
    # Semantic conflict check (cosine similarity of all-MiniLM-L6-v2 vectors).
    "NEAR_DUPLICATE_SIMILARITY": env.float("MEMPROJ_NEAR_DUPLICATE_SIMILARITY", default=0.85),
    "SAME_SUBJECT_SIMILARITY": env.float("MEMPROJ_SAME_SUBJECT_SIMILARITY", default=0.5),
    # memento's store_memory lists earlier memories at or above this cosine
    # similarity as `similar` (tuned on all-MiniLM-L6-v2: "User moved to Austin"
    # vs "User lives in Seattle" 0.53-0.58, unrelated user facts <= 0.36).
    "SIMILAR_THRESHOLD": env.float("MEMPROJ_SIMILAR_THRESHOLD", default=0.45),
    # Consolidation: episodes per tenant per run, tenants per run, cluster shape.
    "CONSOLIDATE_BATCH": env.int("MEMPROJ_CONSOLIDATE_BATCH", default=200),
    "CONSOLIDATE_TENANTS": env.int("MEMPROJ_CONSOLIDATE_TENANTS", default=20),
    "CLUSTER_SIMILARITY": env.float("MEMPROJ_CLUSTER_SIMILARITY", default=0.75),
    "CLUSTER_MIN_SIZE": env.int("MEMPROJ_CLUSTER_MIN_SIZE", default=3),
    # An episode that joined no recurring cluster for this long is marked consolidated
    # (considered) so it is not clustered again on every run.
    "CONSOLIDATE_SETTLE_HOURS": env.float("MEMPROJ_CONSOLIDATE_SETTLE_HOURS", default=24.0),
    # A consolidation run starts no new tenant after this long (keep it well under
    # CELERY_VISIBILITY_TIMEOUT, or a slow LLM run is redelivered while running).
    "CONSOLIDATE_TIME_BUDGET_SECONDS": env.float("MEMPROJ_CONSOLIDATE_TIME_BUDGET_SECONDS", default=120.0),
}

# LLM consolidation: switched on by MEMPROJ_LLM_BASE_URL (any OpenAI-compatible
# chat-completions server: OpenAI, Ollama, vLLM, llama.cpp).
MEMPROJ_LLM_BASE_URL = env.str("MEMPROJ_LLM_BASE_URL", default="")
MEMPROJ_LLM_MODEL = env.str("MEMPROJ_LLM_MODEL", default="gpt-4o-mini")
MEMPROJ_LLM_API_KEY = env.str("MEMPROJ_LLM_API_KEY", default="")
MEMPROJ_LLM_TIMEOUT = env.float("MEMPROJ_LLM_TIMEOUT", default=60.0)
MEMPROJ_LLM_MAX_ATTEMPTS = env.int("MEMPROJ_LLM_MAX_ATTEMPTS", default=3)
MEMPROJ_CONSOLIDATOR = env.str("MEMPROJ_CONSOLIDATOR", default="llm" if MEMPROJ_LLM_BASE_URL else "offline")

from workers.schedule import beat_schedule  # noqa: E402  (the one beat table lives with the tasks)

CELERY_BEAT_SCHEDULE = beat_schedule()
# How often a worker looks for messages whose worker died before acknowledging them
# (redelivered once older than visibility_timeout). Lower both with a short timeout.
CELERY_BROKER_TRANSPORT_OPTIONS.update(
    {
        "unacked_restore_interval": env.int("CELERY_UNACKED_RESTORE_INTERVAL", default=10),
        "unacked_restore_throttle": env.int("CELERY_UNACKED_RESTORE_THROTTLE", default=10),
    }
)
# Optional prefix for every broker key, so several deployments (or test runs) can
# share one Redis database without seeing each other's queues or unacked messages.
if env.str("CELERY_BROKER_KEY_PREFIX", default=""):
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = env.str("CELERY_BROKER_KEY_PREFIX")

# The role the service connects as (memproj/dbroles.py grants it what it needs).
MEMPROJ_DB_APP_USER = DATABASES["default"].get("USER", "")

# Per-tool timeouts (seed 004) are multiplied by this; tests on a shared,
# loaded machine raise it so that a slow CPU is not mistaken for a hung call.
MEMPROJ_TOOL_TIMEOUT_SCALE = env.float("MEMPROJ_TOOL_TIMEOUT_SCALE", default=1.0)
