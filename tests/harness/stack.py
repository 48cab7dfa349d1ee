"""The stack the suites run against: a private `make run` (embedded PostgreSQL
and Redis under a directory of its own, migrations, memproj.serve with its web,
worker and beat processes), uvicorn alone for the speed benchmark, and the
bench databases on the embedded server next to the dev database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.harness.paths import BASE_DIR
from tests.harness.ports import (
    AddressInUse,
    HeldPort,
    free_port,
    log_size,
    on_held_port,
    output_tail,
    retry_if_address_in_use,
    serve_until_ready,
    wait_until_serving,
)
from tests.harness.surfaces.answers import Answer
from tests.harness.surfaces.mcp_http import mcp_call

if TYPE_CHECKING:
    from tests.harness.faults import FakeEmbeddingEndpoint


class Stack:
    """A private `make run`: embedded PostgreSQL and Redis under ``var_dir``,
    migrations, tokens, and memproj.serve (uvicorn + Celery worker + beat)."""

    def __init__(
        self,
        var_dir: Path,
        *,
        port: int | None = None,
        worker_concurrency: int = 1,
        embedder: FakeEmbeddingEndpoint | None = None,
        env_overrides: dict[str, str] | None = None,
    ) -> None:
        self.var_dir = var_dir.resolve()
        self.embedder = embedder
        # memproj.serve is given its port by number: its supervisor starts the web
        # process anew after a crash, each time binding PORT, and cannot be handed
        # a socket without changing it. A port chosen here may be taken before the
        # web process binds it, so start() tries another unless one was asked for.
        self._port_asked_for = port is not None
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.log_path = self.var_dir / "serve.log"
        # Where the output of the latest start (or web restart) begins in log_path.
        self._log_mark = 0
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_", "DATABASE_URL", "MEMPROJ_TEST", "PYTEST", "DJANGO_SETTINGS"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="memproj.settings.base",
            MEMPROJ_VAR_DIR=str(self.var_dir),
            MEMPROJ_PG_SHARED_BUFFERS=os.environ.get("MEMPROJ_RELIABILITY_SHARED_BUFFERS", "128MB"),
            MEMPROJ_WORKER_CONCURRENCY=str(worker_concurrency),
            PYTHONPATH=str(BASE_DIR),
            PYTHONUNBUFFERED="1",
            LOG_LEVEL="WARNING",
            # A message whose worker was killed before the ack is redelivered after
            # this long (300 s in make run); short here so recovery fits the run.
            CELERY_VISIBILITY_TIMEOUT="30",
            CELERY_UNACKED_RESTORE_INTERVAL="5",
        )
        self.env = env
        self._use_port(port or free_port())
        env.update(env_overrides or {})
        self.use_embedder(embedder)

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env.update(PORT=str(port), MEMPROJ_PUBLIC_URL=self.url)

    def use_embedder(self, embedder: FakeEmbeddingEndpoint | None) -> None:
        """Serve with the fake endpoint (embedder faults) or the packaged model
        in-process, as `make run` does; takes effect at the next start."""
        self.embedder = embedder
        for key in ("MEMPROJ_EMBEDDER", "MEMPROJ_EMBEDDING_API_BASE"):
            self.env.pop(key, None)
        if embedder is not None:
            self.env.update(MEMPROJ_EMBEDDER="openai", MEMPROJ_EMBEDDING_API_BASE=embedder.url)

    def run(self, *args: str, timeout: float = 600, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def prepare(self) -> None:
        """Start the private servers and give every run a fresh database: the
        stack is scratch, and a database left by an older checkout may carry a
        migration history that no longer matches (migrations get re-chained)."""
        import psycopg

        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.var_dir.chmod(0o755)
        self.run("-m", "memproj.embedded", "start")
        with psycopg.connect(
            host=str(self.var_dir / "pgdata"), dbname="postgres", autocommit=True, **self.superuser()
        ) as conn:
            conn.execute("DROP DATABASE IF EXISTS memproj WITH (FORCE)")
        self.run("-m", "memproj.embedded", "start")  # creates (and sets up) the database again
        self.run("manage.py", "migrate", "--noinput")

    def issue_token(self, tenant: str, principal: str, *, rate_limit: int | None = None) -> str:
        """A token in ``tenant``; with ``rate_limit``, the tenant's policy allows
        that many calls a minute (the fault scenarios measure durability, and a
        faster server would otherwise meet the default limit instead of the fault)."""
        token = (
            self.run("manage.py", "issue_token", "--tenant", tenant, "--principal", principal).strip().splitlines()[-1]
        )
        if rate_limit is not None:
            from policy.document import SEED_EXAMPLE_YAML

            document = f"{SEED_EXAMPLE_YAML}rate_limit:\n  limit: {int(rate_limit)}\n  window_seconds: 60\n"
            self.run("manage.py", "policy_apply", "--tenant", tenant, "--file", "-", stdin=document)
        return token

    def start(self, *, timeout: float = 300) -> None:
        def serve_on(port: int) -> int:
            self._use_port(port)
            self._log_mark = log_size(self.log_path)
            ready_before = self.workers_ready()
            with open(self.log_path, "ab") as log:
                self.supervisor = subprocess.Popen(
                    [sys.executable, "-m", "memproj.serve"],
                    cwd=BASE_DIR,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                self.wait_healthy(timeout)
            except AddressInUse:
                self.stop_serving()
                raise
            return ready_before

        if self._port_asked_for:
            ready_before = serve_on(self.port)
        else:
            ready_before = retry_if_address_in_use(serve_on, port=self.port)
        self.wait_for_worker(timeout, ready_before=ready_before)
        self.warm_up(timeout)

    def warm_up(self, timeout: float) -> None:
        """/healthz answers before the web process has loaded the embedding model
        (it loads in the background); one search waits for it, so that model
        loading is not mistaken for a slow write in the first scenario."""
        import httpx

        token = self.issue_token("warm-up", "warm-up")

        async def search() -> Answer:
            async with httpx.AsyncClient(timeout=timeout) as http:
                return await mcp_call(http, f"{self.url}/mcp/memory", token, "memory_search", {"query": "warm up"})

        answer = asyncio.run(search())
        if answer.outcome != "ok":
            raise RuntimeError(f"the stack does not answer MCP calls: {answer.text}\n{self.log_tail()}")

    def wait_healthy(self, timeout: float) -> None:
        """Until this stack's own web process answers /healthz on ``self.port``
        (AddressInUse if it found the port taken since the latest start or kill)."""
        if self.supervisor is None:
            raise RuntimeError("the stack has not been started")
        wait_until_serving(
            self.supervisor,
            self.port,
            log_path=self.log_path,
            name="memproj.serve",
            since=self._log_mark,
            timeout=timeout,
            probe="/healthz",
        )

    def workers_ready(self) -> int:
        """How many times a worker has logged that it is ready (one per start)."""
        try:
            return self.log_path.read_text(errors="replace").count(" ready.")
        except FileNotFoundError:
            return 0

    def wait_for_worker(self, timeout: float, *, ready_before: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.child("worker") is not None and self.workers_ready() > ready_before:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the worker did not start; see {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return output_tail(self.log_path, lines=lines)

    def child(self, name: str) -> Any:
        """The supervisor's child process named web, worker or beat (psutil)."""
        import psutil

        if self.supervisor is None:
            return None
        marker = {"web": "memproj.serve web", "worker": " worker", "beat": " beat"}[name]
        try:
            for proc in psutil.Process(self.supervisor.pid).children():
                with contextlib.suppress(psutil.Error):
                    if marker in " ".join(proc.cmdline()):
                        return proc
        except psutil.NoSuchProcess:
            return None
        return None

    def stop_serving(self) -> None:
        """Stop memproj.serve (web, worker, beat); the database and broker stay up."""
        if self.supervisor is not None and self.supervisor.poll() is None:
            self.supervisor.send_signal(signal.SIGTERM)
            try:
                self.supervisor.wait(60)
            except subprocess.TimeoutExpired:
                self.supervisor.kill()
                self.supervisor.wait()

    def stop(self) -> None:
        self.stop_serving()
        with contextlib.suppress(Exception):
            self.run("-m", "memproj.embedded", "stop", timeout=120)

    # Faults -------------------------------------------------------------------------

    def kill_worker(self) -> None:
        worker = self.child("worker")
        if worker is not None:
            os.kill(worker.pid, signal.SIGKILL)

    def kill_web(self) -> None:
        web = self.child("web")
        if web is not None:
            self._log_mark = log_size(self.log_path)
            os.kill(web.pid, signal.SIGKILL)

    def wait_for_web(self, timeout: float = 120) -> None:
        """Until the supervisor's new web process answers."""
        self.wait_healthy(timeout)

    def stop_broker(self) -> None:
        pid = int((self.var_dir / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGTERM)
        import psutil

        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(30)

    def start_broker(self) -> None:
        self.run("-c", "from memproj.embedded import ensure_redis; ensure_redis()")

    def superuser(self) -> dict[str, Any]:
        """The embedded superuser authenticates with its password (memproj/embedded.py)."""
        from memproj.embedded import SUPERUSER_ROLE, role_password

        return {"user": SUPERUSER_ROLE, "password": role_password(SUPERUSER_ROLE, self.var_dir)}

    def stop_postgres(self) -> None:
        self.run("-c", "from memproj.embedded import stop_postgres; print(stop_postgres())")

    def start_postgres(self) -> None:
        self.run("-c", "from memproj.embedded import ensure_postgres; ensure_postgres()")

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(host=str(self.var_dir / "pgdata"), dbname="memproj", **self.superuser()) as conn:
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


@contextlib.contextmanager
def private_stack(prefix: str, **options: Any) -> Iterator[Stack]:
    """A started :class:`Stack` under a fresh temporary directory with a short
    name (Unix socket paths), stopped and removed afterwards."""
    var_dir = Path(tempfile.mkdtemp(prefix=prefix))
    running = Stack(var_dir, **options)
    try:
        running.prepare()
        running.start()
        yield running
    finally:
        running.stop()
        shutil.rmtree(var_dir, ignore_errors=True)


def setup_django_on(stack: Stack) -> None:
    """This process uses the stack's embedded servers as the service would (the
    embedded default under MEMPROJ_VAR_DIR, with the service's database role);
    follow-ups run eagerly here, the in-process parts need no worker."""
    for key in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(key, None)
    os.environ.update(
        MEMPROJ_VAR_DIR=str(stack.var_dir),
        CELERY_TASK_ALWAYS_EAGER="true",
        DJANGO_SETTINGS_MODULE="memproj.settings.base",
        LOG_LEVEL="WARNING",
    )
    import logging

    import django

    import memproj.embedded

    # Stack.superuser imported it already, with the default var/ of its import time.
    memproj.embedded.VAR_DIR = stack.var_dir
    django.setup()
    # The admin and hook surfaces answer many refusals (403/404/422), each logged
    # with a traceback by django.request; server errors (500) are still logged.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    from django.conf import settings

    # Never the dev database: a DATABASE_URL in .env would win over the embedded default.
    host = str(settings.DATABASES["default"].get("HOST", ""))
    if not host.startswith(str(stack.var_dir)):
        raise SystemExit(f"refusing to run against a database outside {stack.var_dir}: host {host!r}")


def start_web(
    db_url: str, workers: int = 1, *, code_dir: Path = BASE_DIR, env_overrides: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """The web process as deployed (``python -m memproj.serve web``: its HTTP
    protocol, keep-alive, connection limit and access log) alone, no worker or
    beat, against ``db_url``, embedding in the request: (the process, the URL
    of its memory toolset's MCP endpoint). ``code_dir`` serves another copy of
    the code (an A/B's baseline) with this checkout's var/ (its model files,
    the embedded Redis). Its output goes to var/bench/web-<port>.log: a pipe
    nobody reads would stall it once full. The port is held until the web
    process serves on it (tests.harness.ports)."""
    with HeldPort() as held:
        port = held.port
        # No query cache in the server either: every search pays its embedding.
        env = dict(
            os.environ,
            DATABASE_URL=db_url,
            MEMPROJ_EMBED_MODE="sync",
            LOG_LEVEL="WARNING",
            MEMPROJ_EMBED_QUERY_CACHE="0",
            MEMPROJ_HOST="127.0.0.1",
            PORT=str(port),
            MEMPROJ_WEB_WORKERS=str(max(1, workers)),
        )
        env.setdefault("MEMPROJ_VAR_DIR", str(BASE_DIR / "var"))
        env.update(env_overrides or {})
        log_path = BASE_DIR / "var" / "bench" / f"web-{port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        proc = serve_until_ready(
            on_held_port([sys.executable, "-m", "memproj.serve", "web"], held),
            held,
            log_path=log_path,
            name="the web process",
            timeout=120,
            probe=None,
            env=env,
            cwd=code_dir,
        )
    return proc, f"http://127.0.0.1:{port}/mcp/memory"


# --- bench databases ---------------------------------------------------------------------
# A separate database for the benchmarks: never the dev database ``memproj`` nor a
# test database. ``MEMPROJ_BENCH_DB`` if set (a full PostgreSQL URL), else
# ``memproj_bench`` created on the embedded server next to ``memproj``. The quality
# benchmark uses ``memproj_bench_quality`` beside it (same server), so its small
# tenants never share an HNSW graph with the 100k-row speed dataset.
BENCH_DB_NAME = "memproj_bench"


def bench_database_url(db_name: str = BENCH_DB_NAME) -> str:
    explicit = os.environ.get("MEMPROJ_BENCH_DB", "")
    if explicit:
        if db_name == BENCH_DB_NAME:
            return explicit
        base, _, query = explicit.partition("?")
        return base.rsplit("/", 1)[0] + "/" + db_name + ("?" + query if query else "")
    from memproj import embedded

    dev_url = embedded.ensure_postgres()  # starts (or finds) the embedded server

    with embedded._start_lock("postgres"):
        exists = embedded.superuser_psql(f"SELECT 1 FROM pg_database WHERE datname = '{db_name}';")
        # Like the dev database: owned by the schema owner (migrations), used as the app role.
        if "(1 row)" not in exists:
            embedded.superuser_psql(f"CREATE DATABASE {db_name} OWNER {embedded.OWNER_ROLE};")
        else:
            embedded.superuser_psql(f"ALTER DATABASE {db_name} OWNER TO {embedded.OWNER_ROLE};")
    owner_url = embedded.postgres_url(embedded.OWNER_ROLE)
    os.environ.setdefault("DATABASE_OWNER_URL", owner_url.replace(f"/{embedded.DATABASE_NAME}?", f"/{db_name}?", 1))
    return dev_url.replace(f"/{embedded.DATABASE_NAME}?", f"/{db_name}?", 1)


def setup_bench_django(*, db_name: str = BENCH_DB_NAME, embed_mode: str = "sync") -> str:
    """Point Django at a bench database, set it up and migrate. Returns the URL."""
    url = bench_database_url(db_name)
    if "/memproj?" in url or url.rstrip("/").endswith("/memproj") or "test_memproj" in url:
        raise SystemExit(f"refusing to benchmark against the dev or test database: {url}")
    os.environ["DATABASE_URL"] = url
    os.environ["MEMPROJ_EMBED_MODE"] = embed_mode
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # The benchmarks measure the model, never the resilience guard: waits long enough
    # that a loaded machine cannot silently turn a hybrid search into a keyword one.
    for name in ("MEMPROJ_EMBED_QUERY_TIMEOUT", "MEMPROJ_EMBED_STORE_TIMEOUT", "MEMPROJ_EMBED_LOCAL_TIMEOUT"):
        os.environ.setdefault(name, "300")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return url
