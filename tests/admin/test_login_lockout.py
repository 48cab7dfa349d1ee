"""The admin login lockout (policy/loginlock.py): after too many failed logins
for a username, or from a client address, within the window, its logins are
refused for the lockout period, the right password included; the words are the
same whether or not the username exists; the counts live in Redis, shared by
every web process, and a Redis outage leaves the lockout working in each
process. Django test client against the real admin, database and Redis."""

from __future__ import annotations

import html
import re
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client, override_settings

from policy import loginlock
from tests.admin.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
WRONG_PASSWORD = "not the password"
LOCKOUT = {"FAILURES": 3, "ADDRESS_FAILURES": 6, "WINDOW_SECONDS": 60, "LOCKOUT_SECONDS": 60}
WRONG_WORDS = "Please enter the correct username and password for a staff account"
LOCKED_WORDS = "Too many failed logins"


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Fresh usernames and client addresses for a test (Redis outlives test
    databases), unlocked again at its end."""
    made: list[str] = []
    yield made
    for name in made:
        if ":" in name:
            loginlock.unlock(address=name)
        else:
            loginlock.unlock(username=name)


def fresh_username(names: list[str]) -> str:
    name = f"reviewer-{uuid.uuid4().hex[:10]}"
    names.append(name)
    return name


def fresh_address(names: list[str]) -> str:
    part = uuid.uuid4().hex
    address = f"2001:db8::{part[:4]}:{part[4:8]}"
    names.append(address)
    return address


def staff(names: list[str]) -> User:
    return User.objects.create_user(username=fresh_username(names), password=PASSWORD, is_staff=True)


def attempt(username: str, password: str, address: str) -> tuple[bool, list[str]]:
    """One login through the admin's form: (logged in, the form's errors)."""
    client = Client(REMOTE_ADDR=address)
    response = client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"})
    if response.status_code == 302:
        assert response["Location"] == "/admin/"
        assert client.get("/admin/").status_code == 200  # the session is a staff login
        return True, []
    assert response.status_code == 200
    assert client.get("/admin/").status_code == 302  # still logged out
    # From the page, as the user reads it (the test client's response.context
    # mixes in the pages other threads render at the same time).
    notes = re.findall(r'<p class="errornote">(.*?)</p>', response.content.decode(), re.S)
    return False, [html.unescape(note.strip()) for note in notes]


def fail(username: str, address: str, times: int) -> None:
    for _ in range(times):
        logged_in, errors = attempt(username, WRONG_PASSWORD, address)
        assert not logged_in and len(errors) == 1 and WRONG_WORDS in errors[0], errors


def assert_locked(username: str, address: str) -> str:
    logged_in, errors = attempt(username, PASSWORD, address)
    assert not logged_in, "the right password logged in during the lockout"
    assert len(errors) == 1 and LOCKED_WORDS in errors[0] and WRONG_WORDS not in errors[0], errors
    return errors[0]


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_after_n_wrong_passwords_the_right_one_is_refused_and_another_username_is_not(names):
    victim, other = staff(names), staff(names)
    address = fresh_address(names)
    fail(victim.username, address, 3)
    message = assert_locked(victim.username, address)
    assert "1" in message or "minute" in message  # it says for how long
    # Another username, from the same address, logs in.
    assert attempt(other.username, PASSWORD, address) == (True, [])
    # The lockout is the username's: another address is refused too.
    assert_locked(victim.username, fresh_address(names))


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT={**LOCKOUT, "LOCKOUT_SECONDS": 1})
def test_the_right_password_works_again_once_the_lockout_ends(names):
    user = staff(names)
    address = fresh_address(names)
    fail(user.username, address, 3)
    assert_locked(user.username, address)
    time.sleep(1.2)
    assert attempt(user.username, PASSWORD, address) == (True, [])


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_the_answers_do_not_tell_whether_the_username_exists(names):
    existing = staff(names).username
    missing = fresh_username(names)
    assert not User.objects.filter(username=missing).exists()
    answers = {}
    for username in (existing, missing):
        address = fresh_address(names)
        wrong = [attempt(username, WRONG_PASSWORD, address) for _ in range(3)]
        locked = [attempt(username, PASSWORD, address) for _ in range(2)]
        answers[username] = (wrong, locked)
    assert answers[existing] == answers[missing]
    wrong, locked = answers[missing]
    assert all(WRONG_WORDS in errors[0] for _, errors in wrong)
    assert all(LOCKED_WORDS in errors[0] for _, errors in locked)


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_an_address_trying_many_usernames_is_locked_for_every_username(names):
    address = fresh_address(names)
    for _ in range(3):
        fail(fresh_username(names), address, 2)  # six failures, none reaching a username's three
    user = staff(names)
    assert_locked(user.username, address)
    assert attempt(user.username, PASSWORD, fresh_address(names)) == (True, [])


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_a_successful_login_clears_the_usernames_count(names):
    user = staff(names)
    address = fresh_address(names)
    fail(user.username, address, 2)
    assert attempt(user.username, PASSWORD, address) == (True, [])
    fail(user.username, address, 2)
    assert attempt(user.username, PASSWORD, address) == (True, [])


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_the_lockout_is_kept_in_redis_for_every_web_process(names):
    user = staff(names)
    address = fresh_address(names)
    fail(user.username, address, 3)
    # A process that has seen none of these attempts: no client, no counts of its own.
    loginlock._redis.clear()
    loginlock._local.clear_all()
    assert_locked(user.username, address)


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT, MEMPROJ_RATE_LIMIT_REDIS_URL="redis://127.0.0.1:1/0")
def test_with_redis_unreachable_the_lockout_still_holds_in_the_process(names):
    try:
        user, other = staff(names), staff(names)
        address = fresh_address(names)
        fail(user.username, address, 3)
        assert_locked(user.username, address)
        assert attempt(other.username, PASSWORD, address) == (True, [])
    finally:
        loginlock._local.clear_all()


@override_settings(MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT)
def test_the_unlock_command_lifts_a_lockout(names, capsys):
    user = staff(names)
    address = fresh_address(names)
    fail(user.username, address, 3)
    assert_locked(user.username, address)
    call_command("admin_login_unlock", user.username)
    assert f"unlocked username {user.username!r}" in capsys.readouterr().out
    assert attempt(user.username, PASSWORD, address) == (True, [])


@override_settings(
    MEMPROJ_ADMIN_LOGIN_LOCKOUT=LOCKOUT,
    # A hash slow enough that the attempts below overlap, as a real one does.
    PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"],
)
def test_attempts_sent_at_once_get_no_more_guesses_than_the_limit(names):
    username = fresh_username(names)  # none such: Django still hashes the password once
    addresses = [fresh_address(names) for _ in range(8)]
    start = threading.Barrier(len(addresses))
    answers: list[tuple[bool, list[str]]] = []

    def guess(address: str) -> None:
        try:
            start.wait()
            answers.append(attempt(username, WRONG_PASSWORD, address))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=guess, args=(address,)) for address in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == len(addresses) and not any(logged_in for logged_in, _ in answers)
    words = sorted("wrong" if WRONG_WORDS in errors[0] else "locked" for _, errors in answers)
    assert words == ["locked"] * 5 + ["wrong"] * 3
