"""``python -m memproj.serve`` starts something only when asked to: found by
running ``python -m memproj.serve --help``, which printed no help and started
the whole stack (web on port 8000, a Celery worker and a second Celery beat,
which sends every periodic task twice beside a running one). A typo (``wbe``)
did the same. Now ``--help`` prints the usage and anything else unknown is
refused with it, exit status 2, starting nothing."""

from __future__ import annotations

import pytest

from memproj import serve


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(serve, "main", lambda: calls.append("stack"))
    monkeypatch.setattr(serve, "web", lambda: calls.append("web"))
    return calls


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"]])
def test_help_prints_the_usage_and_starts_nothing(argv, started, capsys):
    assert serve.cli(argv) == 0
    assert started == []
    assert capsys.readouterr().out.startswith("usage: python -m memproj.serve [web]")


@pytest.mark.parametrize("argv", [["wbe"], ["web", "--port", "9000"], ["--port=9000"], [""]])
def test_unknown_arguments_are_refused_and_start_nothing(argv, started, capsys):
    assert serve.cli(argv) == 2
    assert started == []
    err = capsys.readouterr().err
    assert "nothing started" in err and "usage: python -m memproj.serve [web]" in err


def test_no_argument_starts_the_stack_and_web_the_web_process(started):
    assert serve.cli([]) == 0
    assert serve.cli(["web"]) == 0
    assert started == ["stack", "web"]
