"""`make run`: the web app (admin + MCP HTTP), a Celery worker and beat, as
child processes of this one; Ctrl-C stops all three. The embedded PostgreSQL
and Redis keep running (`make stop` stops them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PROCESSES = {
    "web": [
        sys.executable,
        "-m",
        "uvicorn",
        "memproj.asgi:application",
        "--host",
        os.environ.get("MEMPROJ_HOST", "127.0.0.1"),
        "--port",
        os.environ.get("PORT", "8000"),
    ],
    "worker": [sys.executable, "-m", "celery", "-A", "memproj", "worker", "--loglevel=INFO", "--concurrency=2"],
    "beat": [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "memproj",
        "beat",
        "--loglevel=INFO",
        "--schedule",
        os.path.join("var", "celerybeat-schedule"),
    ],
}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    children = {name: subprocess.Popen(cmd) for name, cmd in PROCESSES.items()}
    print(
        f"memproj: admin at http://127.0.0.1:{os.environ.get('PORT', '8000')}/admin/, "
        f"MCP at /mcp/<toolset>/ ({', '.join(f'{n} pid {p.pid}' for n, p in children.items())})",
        flush=True,
    )

    def stop(*_: object) -> None:
        for proc in children.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        for proc in children.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        for name, proc in children.items():
            if proc.poll() is not None:
                print(f"memproj: {name} exited with {proc.returncode}; stopping the others", flush=True)
                stop()
        time.sleep(1)


if __name__ == "__main__":
    main()
