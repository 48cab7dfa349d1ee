"""Every environment variable memproj reads, in one table: its name, type,
default and what it does. The settings (``base.py``), the embedded servers
(``memproj/embedded.py``) and the ``make run`` supervisor (``memproj/serve.py``)
read a variable only through ``read``, which refuses a name this table does
not hold; ``docs/configuration.md`` is generated from it
(``scripts/settings_docs.py``), and ``tests/test_docs.py`` fails when the code
reads a variable that is missing here or documented without a description.

The beat cadences (``MEMPROJ_BEAT_*``) have their home in the beat table,
``workers/schedule.py``, each with its purpose; ``all_settings`` lists them
with the rest.

Nothing here imports Django: the embedded servers and the supervisor read
their variables before any settings exist."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import environ

_env = environ.Env()

KINDS = ("str", "bool", "int", "float", "list")


@dataclass(frozen=True)
class Computed:
    """A default the reader computes from other values; ``text`` says how, for
    the documentation. ``read`` then needs the caller's ``default=``."""

    text: str


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str
    default: Any
    description: str
    section: str

    @property
    def default_text(self) -> str:
        if isinstance(self.default, Computed):
            return self.default.text
        if self.default is None or self.default == "" or self.default == []:
            return "(empty)"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, list):
            return ", ".join(str(v) for v in self.default)
        return str(self.default)


# Sections, in the order the configuration page shows them.
SECTIONS = (
    "Security and hosts",
    "Database",
    "Broker and Celery",
    "Processes",
    "HTTP edge",
    "Embedding",
    "Retrieval",
    "Tools and limits",
    "Background pipeline",
    "Beat schedule",
    "LLM consolidation",
    "Embedded servers",
    "Tests",
)

_S = Setting

SETTINGS: tuple[Setting, ...] = (
    # --- Security and hosts ---------------------------------------------------------------
    _S(
        "DJANGO_SECRET_KEY",
        "str",
        Computed("a key generated once into `var/secrets/django-secret-key` (0600)"),
        "Django's signing key (sessions, CSRF). Unset, the key generated for this install is used while the "
        "service is reachable from this machine only; once it is served beyond this machine (`MEMPROJ_HOST` not "
        "a loopback address, or `DJANGO_ALLOWED_HOSTS` naming another host) every process refuses to start "
        "until it is set to a long random value, the same for every host (unless `DJANGO_DEBUG` is on). The "
        "former public default `memproj-dev-insecure-change-me` is refused there too, and warned about "
        "(`memproj.W001`) elsewhere.",
        "Security and hosts",
    ),
    _S("DJANGO_DEBUG", "bool", False, "Django's debug mode (never in production).", "Security and hosts"),
    _S(
        "DJANGO_ALLOWED_HOSTS",
        "list",
        ["127.0.0.1", "localhost", "[::1]"],
        "Host names the Django routes (admin, `/api/`) answer to, comma-separated.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        "list",
        [],
        "Origins trusted for the admin's unsafe requests (e.g. `https://memory.example.com`), comma-separated.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_HTTPS",
        "bool",
        False,
        "Served over https: turns on secure session and CSRF cookies, the redirect to https and a year of HSTS "
        "(each also settable alone below). The MCP endpoints never redirect.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_SESSION_COOKIE_SECURE",
        "bool",
        Computed("`MEMPROJ_HTTPS`"),
        "Send the admin's session cookie over https only.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_CSRF_COOKIE_SECURE",
        "bool",
        Computed("`MEMPROJ_HTTPS`"),
        "Send the CSRF cookie over https only.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_SECURE_SSL_REDIRECT",
        "bool",
        Computed("`MEMPROJ_HTTPS`"),
        "Redirect plain-http requests of the Django routes to https.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_SECURE_HSTS_SECONDS",
        "int",
        Computed("31536000 with `MEMPROJ_HTTPS`, else 0"),
        "`Strict-Transport-Security` max-age of the Django routes; 0 sends none.",
        "Security and hosts",
    ),
    _S(
        "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "bool",
        False,
        "Add `includeSubDomains` to the HSTS header.",
        "Security and hosts",
    ),
    _S("DJANGO_SECURE_HSTS_PRELOAD", "bool", False, "Add `preload` to the HSTS header.", "Security and hosts"),
    _S(
        "DJANGO_SECURE_PROXY_SSL_HEADER",
        "bool",
        False,
        "Behind a proxy that terminates TLS: trust `X-Forwarded-Proto: https` to mean the request came over https.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_PUBLIC_URL",
        "str",
        "",
        "Public base URL of the HTTP endpoints, as clients reach them (the OAuth protected-resource metadata "
        "that a 401 points to, the admin address in var/bootstrap.txt); empty: http://127.0.0.1:<PORT>.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_MCP_ALLOWED_HOSTS",
        "list",
        ["127.0.0.1:*", "localhost:*", "[::1]:*", "testserver"],
        "Host headers the MCP endpoints accept (DNS-rebinding protection): `name:*` admits `name:` and a numeric "
        "port; an `Origin`, when sent, must name an allowed host too.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_AUDIT_KEY",
        "str",
        Computed("a key generated once into `var/secrets/audit.key` (0600)"),
        "The audit chain's HMAC key; it never reaches the database. Give it from outside the service's OS user "
        "to separate it from the database owner's password (see Reliability).",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_ADMIN_LOGIN_FAILURES",
        "int",
        5,
        "Failed admin logins for one username (existing or not) within `MEMPROJ_ADMIN_LOGIN_WINDOW` that lock "
        "it for `MEMPROJ_ADMIN_LOGIN_LOCKOUT`: its logins are refused, the right password included. A successful "
        "login clears the username's count. Counted in Redis (the rate limiter's), so every web process shares "
        "it. 0: no lockout by username.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_ADMIN_LOGIN_ADDRESS_FAILURES",
        "int",
        20,
        "Failed admin logins from one client address (any usernames) within `MEMPROJ_ADMIN_LOGIN_WINDOW` that "
        "lock that address for `MEMPROJ_ADMIN_LOGIN_LOCKOUT`. 0: no lockout by address.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_ADMIN_LOGIN_WINDOW",
        "int",
        900,
        "Seconds from a username's or address's first failed admin login in which its failures count.",
        "Security and hosts",
    ),
    _S(
        "MEMPROJ_ADMIN_LOGIN_LOCKOUT",
        "int",
        900,
        "Seconds a locked username or address stays refused (`manage.py admin_login_unlock` lifts it sooner).",
        "Security and hosts",
    ),
    # --- Database -------------------------------------------------------------------------
    _S(
        "DATABASE_URL",
        "str",
        Computed("the embedded PostgreSQL under `var/pgdata`, as `memproj_app`"),
        "PostgreSQL >= 15 with pgvector >= 0.7 (>= 0.8 for iterative index scans), as the service's role, which "
        "should own nothing. Unset: the embedded server.",
        "Database",
    ),
    _S(
        "DATABASE_OWNER_URL",
        "str",
        Computed("embedded: `memproj_owner`; else (empty): `DATABASE_URL`'s role does both"),
        "The schema owner's URL for the same database: `manage.py migrate` connects as it and grants the "
        "service's role what it needs. Ignored with the embedded server, which has its own owner role.",
        "Database",
    ),
    _S(
        "DB_CONN_MAX_AGE",
        "int",
        60,
        "Seconds a process keeps a database connection open between requests (Django's `CONN_MAX_AGE`).",
        "Database",
    ),
    _S(
        "MEMPROJ_DB_PREPARED",
        "bool",
        True,
        "Send the keyword channel's statement prepared, once per connection and tenant, so PostgreSQL parses and "
        "plans it once instead of on every search. Set false behind a proxy that pools connections per "
        "transaction (PgBouncer in transaction mode), where a prepared statement does not outlive its transaction.",
        "Database",
    ),
    _S(
        "MEMPROJ_SIDE_READ_THREADS",
        "int",
        4,
        "Threads per process, each with its own database connection, that run a request's independent reads "
        "side by side (a hybrid search's vector channel beside its keyword channel). Reads run in turn inside a "
        "transaction, when these threads are taken, or while the process has more reads in flight than cores; "
        "0 always runs them in turn.",
        "Database",
    ),
    # --- Broker and Celery ----------------------------------------------------------------
    _S(
        "CELERY_BROKER_URL",
        "str",
        Computed("the embedded Redis on `var/redis.sock`"),
        "The Celery broker (Redis). Also the rate limiter's Redis unless `MEMPROJ_RATE_LIMIT_REDIS_URL` is set.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_RESULT_BACKEND",
        "str",
        "",
        "Celery result backend; empty keeps no results (no task's result is read).",
        "Broker and Celery",
    ),
    _S(
        "CELERY_TASK_DEFAULT_QUEUE",
        "str",
        "celery",
        "The queue tasks go to, so several deployments (or test runs) can share one broker.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_BROKER_KEY_PREFIX",
        "str",
        "",
        "A prefix for every broker key, so several deployments share one Redis database without seeing each "
        "other's queues or unacknowledged messages.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_VISIBILITY_TIMEOUT",
        "int",
        300,
        "Seconds a delivered, unacknowledged message waits before another worker gets it (tasks are acknowledged "
        "late, so a killed worker's task is redelivered after this).",
        "Broker and Celery",
    ),
    _S(
        "CELERY_BROKER_SOCKET_TIMEOUT",
        "float",
        5.0,
        "Seconds a broker connection or command (a write's enqueue, a sweep re-enqueueing itself) may take before "
        "it fails. A broker that stops answering without closing the connection (frozen, a failover, a NAT or "
        "firewall timeout) otherwise holds a write's answer for ever; a failed enqueue is left to the drain sweep.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_UNACKED_RESTORE_INTERVAL",
        "int",
        10,
        "Seconds between a worker's looks for messages whose worker died before acknowledging them.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_UNACKED_RESTORE_THROTTLE",
        "int",
        10,
        "Seconds a worker waits between two such restores; lower both with a short visibility timeout.",
        "Broker and Celery",
    ),
    _S(
        "CELERY_TASK_ALWAYS_EAGER",
        "bool",
        False,
        "Run tasks in the calling process instead of a worker (debugging only).",
        "Broker and Celery",
    ),
    _S(
        "MEMPROJ_RATE_LIMIT_REDIS_URL",
        "str",
        Computed("(empty): the Celery broker's Redis"),
        "The Redis server that holds the per-token rate-limit counters and the token revocation generation.",
        "Broker and Celery",
    ),
    # --- Processes ------------------------------------------------------------------------
    _S(
        "MEMPROJ_HOST",
        "str",
        "127.0.0.1",
        "The address the web process binds. A non-loopback address means the service is served beyond this "
        "machine (then `DJANGO_SECRET_KEY` must be set).",
        "Processes",
    ),
    _S("PORT", "int", 8000, "The port the web process binds.", "Processes"),
    _S(
        "MEMPROJ_WEB_WORKERS",
        "int",
        1,
        "uvicorn worker processes of the web tier; more pay off only beyond 2 cores (each loads its own "
        "embedding model).",
        "Processes",
    ),
    _S(
        "MEMPROJ_WORKER_CONCURRENCY",
        "int",
        2,
        "Celery worker processes that `make run` starts.",
        "Processes",
    ),
    _S(
        "MEMPROJ_RESTART_BACKOFF_MAX",
        "float",
        30.0,
        "Longest wait, in seconds, before `make run` restarts a child process that keeps crashing.",
        "Processes",
    ),
    _S(
        "MEMPROJ_TOKEN",
        "str",
        "",
        "The API token of the stdio MCP server (`bin/memproj-mcp`, `python -m mcp_server`).",
        "Processes",
    ),
    _S("LOG_LEVEL", "str", "INFO", "The root logger's level.", "Processes"),
    # --- HTTP edge ------------------------------------------------------------------------
    _S(
        "MEMPROJ_HTTP_MAX_BODY_BYTES",
        "int",
        2 * 1024 * 1024,
        "Largest request body of any route, in bytes; a larger one is answered 413 before it is read (by "
        "Content-Length) or as it streams. `/api/ingest` alone allows its 10 MB document plus 64 KiB of JSON.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_HEADER_TIMEOUT",
        "float",
        10.0,
        "Seconds a client has to send a request line and headers, from the connection's start or the previous "
        "response's end (408, or a silent close when it sent nothing).",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_BODY_TIMEOUT",
        "float",
        30.0,
        "Seconds a client has to send a whole request body, from the end of its headers, plus its declared "
        "length at 64 KiB/s (a coded 408 in the route's error shape, or, once the request is answered, the "
        "connection closed). A deadline for the whole body, not between chunks: a body trickled a byte at a "
        "time cannot stretch it.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_KEEP_ALIVE_TIMEOUT",
        "int",
        75,
        "Seconds an idle kept-alive connection stays open. Keep it above the idle expiry of the clients' and "
        "the balancer's connection pools (httpx 5 s, aiohttp 15 s, nginx upstream 60 s): a connection closed "
        "while a pool still counts it fresh loses the request sent on it.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_LIMIT_CONCURRENCY",
        "int",
        512,
        "Open connections or requests in flight per web process; beyond it a request is answered 503 with "
        "`Retry-After`. 0: no limit.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_MAX_HEADER_BYTES",
        "int",
        16 * 1024,
        "Largest request line plus headers, in bytes (a coded 400 beyond).",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_HTTP_BACKLOG",
        "int",
        2048,
        "Connections the kernel queues before the web process accepts them.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_FORWARDED_ALLOW_IPS",
        "str",
        "",
        "Comma-separated addresses of reverse proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` are "
        "believed; empty believes none, so the address the rate limit counts by cannot be written by a client.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_ANONYMOUS_RATE_LIMIT",
        "int",
        1000,
        "Requests without a valid token (none, unknown, revoked or expired) allowed per client address and window.",
        "HTTP edge",
    ),
    _S(
        "MEMPROJ_ANONYMOUS_RATE_WINDOW",
        "int",
        10,
        "The window of `MEMPROJ_ANONYMOUS_RATE_LIMIT`, in seconds.",
        "HTTP edge",
    ),
    # --- Embedding ------------------------------------------------------------------------
    _S(
        "MEMPROJ_EMBEDDER",
        "str",
        "local",
        "`local`: the packaged all-MiniLM-L6-v2 in-process; `openai`: any OpenAI-compatible `/v1/embeddings` "
        "endpoint (`MEMPROJ_EMBEDDING_API_BASE`, `MEMPROJ_EMBEDDING_API_KEY`, `MEMPROJ_EMBEDDING_MODEL`). After a "
        "change run `manage.py reembed` (or let the nightly re-embed sweep catch up).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDING_MODEL",
        "str",
        "all-MiniLM-L6-v2",
        "The embedding model's name; recorded with every vector, so vectors of another model are re-embedded.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDING_API_BASE",
        "str",
        "",
        "Base URL of the OpenAI-compatible embeddings endpoint (`MEMPROJ_EMBEDDER=openai`).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDING_API_KEY",
        "str",
        "",
        "Sent as `Authorization: Bearer ...` to the embeddings endpoint.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_MODE",
        "str",
        "sync",
        "`sync`: a write embeds before it answers (when the embedder is down it is kept pending); `async`: writes "
        "answer at once and a worker adds the vector (keyword-searchable meanwhile).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDING_BACKEND",
        "str",
        "onnx",
        "The local model's runtime: `onnx` (ONNX Runtime, exported from the packaged weights into `var/models`) "
        "or `torch`. Both compute the same model and record the same name.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDER_PRECISION",
        "str",
        "fp32",
        "`int8`: the local model as a per-channel INT8 ONNX graph (built on first use next to the fp32 one), 0.6x "
        "the CPU per query at hybrid recall within about a point of fp32 (docs/retrieval-quality.md). Vectors "
        "are recorded as `all-MiniLM-L6-v2+int8`, so after switching run `manage.py reembed` or let the re-embed "
        "sweep catch up. Local ONNX only.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBEDDING_THREADS",
        "int",
        0,
        "Streams of the local ONNX model's passes of more than 4 texts (a worker's or an import's batch): the "
        "pass is cut into chunks of up to 32 texts, and each stream runs whole chunks on its own thread; 0 is one "
        "stream per core the process may use. A pass of up to 4 texts (a query, or the few that arrive together) "
        "runs on the calling thread: spread over cores it costs more CPU than it saves time.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_TEXT",
        "str",
        "ctx1short",
        "What is embedded for an episode: `ctx1short` (its content, with the previous turn of its session when "
        "that turn is at most 300 characters: an exchange of short turns), `plain` (its content) or `ctx1` (the "
        "previous turn's first 300 characters whatever its length: worse when it is a long answer). Facts, rules, "
        "documents and episodes of no session are embedded as stored. Vectors record the choice, so the re-embed "
        "sweep redoes the episodes of sessions after a change.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_QUERY_TIMEOUT",
        "float",
        2.0,
        "Seconds a query waits for a remote embedder before the search degrades to keyword only.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_STORE_TIMEOUT",
        "float",
        5.0,
        "Seconds a write waits for a remote embedder before it is stored pending (embedded later by the worker).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_HTTP_TIMEOUT",
        "float",
        10.0,
        "Seconds of one HTTP request to the embeddings endpoint.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_LOCAL_TIMEOUT",
        "float",
        30.0,
        "Seconds a call waits for the in-process model, which queues under CPU overload rather than hanging.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_LOAD_TIMEOUT",
        "float",
        300.0,
        "Seconds the first call may take to load the model (an ONNX export, or importing torch).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_BREAKER_FAILURES",
        "int",
        3,
        "Consecutive embedder failures that open the circuit breaker (calls fail fast until the cooldown).",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_BREAKER_COOLDOWN",
        "float",
        30.0,
        "Seconds before an open circuit breaker lets a probe through.",
        "Embedding",
    ),
    _S(
        "MEMPROJ_EMBED_BATCH_WINDOW_MS",
        "float",
        2.0,
        "Milliseconds concurrent requests wait to share one forward pass of the model.",
        "Embedding",
    ),
    _S("MEMPROJ_EMBED_BATCH_MAX", "int", 64, "Largest micro-batch of texts in one forward pass.", "Embedding"),
    _S(
        "MEMPROJ_EMBED_QUERY_CACHE",
        "int",
        512,
        "Query vectors kept per process (least recently used); 0 keeps none.",
        "Embedding",
    ),
    # --- Retrieval ------------------------------------------------------------------------
    _S(
        "MEMPROJ_FUSION",
        "str",
        "conf",
        "Hybrid fusion: `conf` (each channel min-max spread over its candidates, the vector weight set per query "
        "from the keyword channel's coverage of the query), `adaptive` (the same, the weight a logistic function of "
        "the query's channel features, fitted across the development sets) or `rrf` (reciprocal rank fusion). The "
        "benchmark's other fusions are in `bench/_fusions.py`.",
        "Retrieval",
    ),
    _S(
        "MEMPROJ_FUSION_ALPHA",
        "float",
        0.7,
        "Vector-channel weight of the fusions that blend channels when no tenant policy gives one; the tenant "
        "policy's `retrieval.hybrid.alpha` (0.65 by default) wins.",
        "Retrieval",
    ),
    _S(
        "MEMPROJ_FUSION_CONF_GAIN",
        "float",
        2.0,
        "`conf` fusion: how strongly the keyword channel's coverage of the query moves weight to it (at coverage "
        "1 / gain the weight is the policy's alpha).",
        "Retrieval",
    ),
    _S(
        "MEMPROJ_KEYWORD_SCORER",
        "str",
        "bm25",
        "The keyword channel's score: `bm25` (k1 1.2, b 0.75, IDF from the tenant's own term statistics) or, for "
        "experiments, `cover_density` (PostgreSQL's `ts_rank_cd`).",
        "Retrieval",
    ),
    _S(
        "MEMPROJ_TIME_BOOST",
        "float",
        0.2,
        'Time-aware ranking: when a query names a period ("last week", "in May 2023"), memories from that period '
        "rise by up to this weight after fusion (never a filter); 0 turns it off.",
        "Retrieval",
    ),
    # --- Tools and limits -----------------------------------------------------------------
    _S(
        "MEMPROJ_CONTEXT_TOKEN_BUDGET",
        "int",
        3000,
        "Default token budget of `memory_context`.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_CONTEXT_QUOTA_FACTS",
        "float",
        0.5,
        "Share of a context budget the Facts section may take (an unused share rolls over).",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_CONTEXT_QUOTA_RULES",
        "float",
        0.3,
        "Share of a context budget the Rules section may take.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_CONTEXT_QUOTA_EPISODES",
        "float",
        0.2,
        "Share of a context budget the Recent episodes section may take.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_MAX_CONTENT_CHARS",
        "int",
        16_000,
        "Longest memory text a tool accepts, in characters.",
        "Tools and limits",
    ),
    _S("MEMPROJ_MAX_QUERY_CHARS", "int", 2_000, "Longest query a tool accepts, in characters.", "Tools and limits"),
    _S(
        "MEMPROJ_IDEMPOTENCY_TTL_SECONDS",
        "int",
        24 * 3600,
        "How long a write's idempotency key replays its answer; the `idempotency-keys-expire` sweep deletes it "
        "afterwards.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_IDEMPOTENCY_WAIT_SECONDS",
        "float",
        10.0,
        "How long a duplicate waits for the first request with its key before it answers the dialect's retryable "
        "timeout error.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_ACTIVE_CONTEXT_TTL_SECONDS",
        "int",
        1800,
        "How long a pce active context (`pce.memory.activate`'s ranked snapshot, paged by cursor) lives; "
        "afterwards its cursor answers `GONE` and the `active-contexts-expire` sweep deletes it.",
        "Tools and limits",
    ),
    _S(
        "MEMPROJ_TOOL_TIMEOUT_SCALE",
        "float",
        1.0,
        "Multiplies every tool's time limit (pce's per-tool timeouts); the test settings raise it on a loaded machine.",
        "Tools and limits",
    ),
    # --- Background pipeline --------------------------------------------------------------
    _S(
        "MEMPROJ_SWEEP_BATCH",
        "int",
        500,
        "Rows one sweep run handles; a run re-enqueues itself while more remains.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_SWEEP_PER_TENANT",
        "int",
        100,
        "At most this many rows per tenant per sweep run (tenants round-robin), so one tenant's backlog cannot "
        "starve the others.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_EXPIRED_RETENTION_DAYS",
        "float",
        30.0,
        "Days an expired memory's row stays (out of retrieval, for audit) before the expiry sweep deletes it.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_EMBED_RETRY_GRACE_SECONDS",
        "int",
        60,
        "A pending embedding younger than this is left to the task enqueued at write time; the retry sweep takes "
        "older ones.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_EMBED_MAX_ATTEMPTS",
        "int",
        20,
        "Embedding attempts before a memory is marked `failed` (`manage.py reembed --failed` puts it back).",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_FOLLOWUP_GRACE_SECONDS",
        "int",
        60,
        "An open follow-up (outbox row) younger than this is left to the task enqueued after its write; the "
        "`followups-drain` sweep runs older ones.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_NEAR_DUPLICATE_SIMILARITY",
        "float",
        0.85,
        "Cosine similarity at or above which two memories of one kind, namespace and scope become a duplicate "
        "conflict candidate (the same statement merges; similarity alone never does).",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_SAME_SUBJECT_SIMILARITY",
        "float",
        0.5,
        "Cosine similarity at or above which two facts of one subject become a contradiction candidate.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_SIMILAR_THRESHOLD",
        "float",
        0.45,
        "memento's `store_memory` lists earlier memories at or above this cosine similarity as `similar`.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CONSOLIDATE_BATCH",
        "int",
        200,
        "Episodes per tenant one consolidation run takes.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CONSOLIDATE_TENANTS",
        "int",
        20,
        "Tenants one consolidation run serves, longest-waiting first.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CLUSTER_SIMILARITY",
        "float",
        0.75,
        "Offline consolidation: cosine to a cluster's centroid an episode needs to join it.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CLUSTER_MIN_SIZE",
        "int",
        3,
        "Offline consolidation: episodes a cluster needs to become a candidate fact or rule.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CONSOLIDATE_SETTLE_HOURS",
        "float",
        24.0,
        "An episode that joined no recurring cluster for this long is marked consolidated, so it is not "
        "clustered again on every run.",
        "Background pipeline",
    ),
    _S(
        "MEMPROJ_CONSOLIDATE_TIME_BUDGET_SECONDS",
        "float",
        120.0,
        "A consolidation run starts no new tenant after this long; keep it well under "
        "`CELERY_VISIBILITY_TIMEOUT`, or a slow LLM run is redelivered while it runs.",
        "Background pipeline",
    ),
    # --- LLM consolidation ----------------------------------------------------------------
    _S(
        "MEMPROJ_LLM_BASE_URL",
        "str",
        "",
        "Base URL of an OpenAI-compatible chat-completions server (OpenAI, Ollama, vLLM, llama.cpp); setting it "
        "switches consolidation to the LLM.",
        "LLM consolidation",
    ),
    _S("MEMPROJ_LLM_MODEL", "str", "gpt-4o-mini", "The model name the server knows.", "LLM consolidation"),
    _S(
        "MEMPROJ_LLM_API_KEY",
        "str",
        "",
        "Sent as `Authorization: Bearer ...` to the chat-completions server.",
        "LLM consolidation",
    ),
    _S("MEMPROJ_LLM_TIMEOUT", "float", 60.0, "Seconds per chat-completions request.", "LLM consolidation"),
    _S(
        "MEMPROJ_LLM_MAX_ATTEMPTS",
        "int",
        3,
        "Answers tried per batch (a malformed one is sent back with the validation error) before giving up "
        "until the next run.",
        "LLM consolidation",
    ),
    _S(
        "MEMPROJ_CONSOLIDATOR",
        "str",
        Computed("`llm` when `MEMPROJ_LLM_BASE_URL` is set, else `offline`"),
        "Force one consolidator: `offline` (clusters episodes by embedding) or `llm`.",
        "LLM consolidation",
    ),
    # --- Embedded servers -----------------------------------------------------------------
    _S(
        "MEMPROJ_VAR_DIR",
        "str",
        Computed("`var/` in the checkout"),
        "Where the embedded PostgreSQL and Redis, the secrets, the exported model graphs and the beat schedule "
        "file live.",
        "Embedded servers",
    ),
    _S(
        "MEMPROJ_PG_SHARED_BUFFERS",
        "str",
        "512MB",
        "The embedded PostgreSQL's `shared_buffers`, applied when a process starts the server (a running "
        "server keeps its value: `make stop`, then start again); lower it on a small machine.",
        "Embedded servers",
    ),
    _S(
        "MEMPROJ_PG_MAINTENANCE_WORK_MEM",
        "str",
        "256MB",
        "The embedded PostgreSQL's `maintenance_work_mem` (index builds).",
        "Embedded servers",
    ),
    # --- Tests ----------------------------------------------------------------------------
    _S(
        "MEMPROJ_TEST_DB_SUFFIX",
        "str",
        "",
        "Test settings only: suffix of the test database's name, so parallel runs on one server do not collide.",
        "Tests",
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}

_NO_DEFAULT = object()


def setting(name: str) -> Setting:
    """The table's entry for ``name``; a name it does not hold is an error."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"{name} is not in memproj/settings/environment.py: add it there, with its description"
        ) from None


def read(name: str, default: Any = _NO_DEFAULT) -> Any:
    """The variable's value from the environment, parsed as the table says,
    else its default. A ``Computed`` default is the caller's to give; any
    other default is the table's alone (one place for each)."""
    entry = setting(name)
    if isinstance(entry.default, Computed):
        if default is _NO_DEFAULT:
            raise TypeError(f"{name}'s default is computed ({entry.default.text}): pass default=")
        value = default
    elif default is not _NO_DEFAULT:
        raise TypeError(f"{name}'s default lives in the table ({entry.default!r}); do not pass one")
    else:
        value = entry.default
    if entry.kind == "list" and isinstance(value, list):
        value = list(value)
    return getattr(_env, entry.kind)(name, default=value)


def all_settings() -> Iterator[Setting]:
    """This table, then the beat cadences from ``workers/schedule.py``."""
    yield from SETTINGS
    from workers.schedule import SCHEDULE

    for entry in SCHEDULE:
        yield Setting(
            entry.env_var,
            "str",
            entry.default,
            f"Cadence of the `{entry.name}` beat entry (a UTC crontab, or `off`): {entry.purpose}.",
            "Beat schedule",
        )
