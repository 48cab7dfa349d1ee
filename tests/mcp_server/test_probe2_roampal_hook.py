"""The Claude Code hook script (scripts/claude_hooks/roampal_hook.py) run as
Claude Code runs it, against a live server: an exchange each of whose texts is
within its field's limit is recorded whatever its characters, and the hook
never fails the session (exit 0, a note on stderr).

Before: the body was JSON with ASCII escapes (6 bytes a character, 12 an
emoji), so a long exchange in Chinese came to more than the 2 MiB the route
takes and was refused whole (413); a NUL or a lone surrogate in the model's
answer lost the exchange (422); a transcript with one byte that is not UTF-8
recorded nothing ('memproj unavailable'); MEMPROJ_HOOK_TIMEOUT=abc and a
MEMPROJ_URL answering a JSON array ended in a traceback (exit 1)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.models import Exchange, Memory
from tests.mcp_server.test_roampal_hooks import HOOK
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)


def hook(base: str, token: str, command: str, event: dict, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HOOK), command],
        input=json.dumps(event),
        env={
            "MEMPROJ_URL": base,
            "MEMPROJ_TOKEN": token,
            "MEMPROJ_HOOK_TIMEOUT": "120",
            "PATH": "/usr/bin:/bin",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def transcript(path: Path, user: str, assistant: str) -> Path:
    lines = [
        {"type": "user", "message": {"role": "user", "content": user}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": assistant}]}},
    ]
    # As Claude Code writes it (JSON.stringify): UTF-8, no ASCII escapes but a
    # lone surrogate's (well-formed JSON.stringify escapes it).
    text = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n"
    path.write_bytes(text.encode("utf-8", "backslashreplace"))
    return path


def stop_event(path: Path, session: str) -> dict:
    return {"session_id": session, "transcript_path": str(path), "hook_event_name": "Stop", "stop_hook_active": False}


def recorded(session: str) -> Exchange:
    return Exchange.objects.get(conversation_id=session)


def test_a_long_exchange_in_chinese_is_recorded(http_server, member, tmp_path):  # noqa: F811
    # Each text at its field's limit (100,000 and 200,000 characters).
    user, answer = "部署" * 50_000, "发布" * 100_000
    done = hook(http_server, member.token, "stop", stop_event(transcript(tmp_path / "t.jsonl", user, answer), "zh"))
    assert done.returncode == 0 and not done.stderr, done.stderr
    exchange = recorded("zh")
    assert (exchange.user_message, exchange.assistant_response) == (user, answer)
    assert exchange.transcript  # its tail, as much as the body had room for


def test_a_nul_and_a_lone_surrogate_in_the_answer_do_not_lose_the_exchange(http_server, member, tmp_path):  # noqa: F811
    path = transcript(tmp_path / "t.jsonl", "what is in the log?", "the log has a\x00b and \ud800 in it")
    done = hook(http_server, member.token, "stop", stop_event(path, "odd"))
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert recorded("odd").assistant_response == "the log has ab and \ufffd in it"


def test_a_transcript_with_a_byte_that_is_not_utf8_still_records_the_exchange(http_server, member, tmp_path):  # noqa: F811
    path = transcript(tmp_path / "t.jsonl", "deploy?", "run make release")
    path.write_bytes(b'{"type": "progress", "note": "caf\xe9"}\n' + path.read_bytes())
    done = hook(http_server, member.token, "stop", stop_event(path, "latin"))
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert recorded("latin").assistant_response == "run make release"


def test_a_timeout_that_is_no_number_is_said_and_the_hook_goes_on(http_server, member, tmp_path):  # noqa: F811
    path = transcript(tmp_path / "t.jsonl", "deploy?", "run make release")
    done = hook(http_server, member.token, "stop", stop_event(path, "t"), MEMPROJ_HOOK_TIMEOUT="abc")
    assert done.returncode == 0 and "MEMPROJ_HOOK_TIMEOUT='abc'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert recorded("t").assistant_response == "run make release"


@pytest.fixture
def not_memproj() -> Iterator[str]:
    """A server at MEMPROJ_URL that is not memproj: it answers every POST 200 with a JSON array."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"[1, 2, 3]"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_url_that_answers_no_json_object_is_said_and_the_hook_goes_on(not_memproj, tmp_path):
    path = transcript(tmp_path / "t.jsonl", "deploy?", "run make release")
    for command, event in (
        ("stop", stop_event(path, "s")),
        ("user-prompt-submit", {"prompt": "hi", "session_id": "s"}),
    ):
        done = hook(not_memproj, "mp_x", command, event)
        assert done.returncode == 0 and "continuing without memory" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    assert Memory.objects.count() == 0
