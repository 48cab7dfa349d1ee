"""Login lockout for the admin (every password login goes through Django's
``authenticate``): after ``FAILURES`` failed logins for one username, or
``ADDRESS_FAILURES`` from one client address (any usernames), within
``WINDOW_SECONDS``, that username or address is refused for
``LOCKOUT_SECONDS``, the right password included
(``settings.MEMPROJ_ADMIN_LOGIN_LOCKOUT``).

- ``LoginLockoutBackend``, first in ``AUTHENTICATION_BACKENDS``, checks no
  password: it counts the attempt, or refuses it (Django's ``authenticate``
  stops at a backend's PermissionDenied) before ModelBackend hashes anything.
  An attempt is counted before its password is checked and given back when
  the login succeeds (Django's ``user_logged_in``), so a count is the failures
  plus the attempts in flight, and many attempts sent at once cannot all slip
  in before the first failures are counted.
- Every username is counted alike, existing or not, so neither the errors nor
  the lockout tell whether an account exists. A successful login clears its
  username's count; its address gets back only that attempt (a valid account
  must not buy an address fresh guesses at others).
- The counts live in Redis, the rate limiter's (policy/ratelimit.py), so every
  web process sees them; each check is one Lua script, atomic. Keys are scoped
  by the database name, so deployments (and test runs) sharing a Redis do not
  share lockouts. If Redis cannot be reached the counting goes on in the
  process's memory (logged): the rate limiter fails open, but a lockout that
  vanished with Redis would leave passwords unguarded.
- ``AdminLoginForm`` (the admin's login form) says the login is locked and for
  how long, in the same words for every username.

``manage.py admin_login_unlock`` lifts a lockout before it ends."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.signals import user_logged_in
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.dispatch import receiver
from django.http import HttpRequest

from policy.ratelimit import redis_url

logger = logging.getLogger(__name__)

KEY_PREFIX = "memproj:login:"
# Set on a request whose login the lockout refused (the seconds it has left):
# the form words its error from it.
LOCKED_ATTRIBUTE = "_memproj_login_locked_seconds"
# Set on a request whose attempt was counted, so that its success gives the
# address back that attempt (and only then).
COUNTED_ATTRIBUTE = "_memproj_login_counted"

# KEYS: (counter, lock) pairs; ARGV: window ms, lockout ms, then each pair's
# limit (0: not counted). Answers 0 when the attempt may go on (counted), else
# the milliseconds its lockout has left. An attempt past a limit locks that
# pair (its counter dropped, so the lockout's end brings a fresh count) and is
# not counted against the others.
ATTEMPT = """
local window_ms, lockout_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = #KEYS / 2
local remaining = 0
for i = 1, n do
  local left = redis.call('PTTL', KEYS[2 * i])
  if left > remaining then
    remaining = left
  end
end
if remaining > 0 then
  return remaining
end
local over = {}
local refused = false
for i = 1, n do
  local limit = tonumber(ARGV[2 + i])
  if limit > 0 then
    local count = redis.call('INCR', KEYS[2 * i - 1])
    if count == 1 then
      redis.call('PEXPIRE', KEYS[2 * i - 1], window_ms)
    end
    if count > limit then
      over[i] = true
      refused = true
    end
  end
end
if not refused then
  return 0
end
for i = 1, n do
  if over[i] then
    redis.call('SET', KEYS[2 * i], '1', 'PX', lockout_ms)
    redis.call('DEL', KEYS[2 * i - 1])
  elseif tonumber(ARGV[2 + i]) > 0 then
    redis.call('DECR', KEYS[2 * i - 1])
  end
end
return lockout_ms
"""

# KEYS: counters to drop, then counters to give one attempt back (ARGV[1]: how
# many to drop). A counter that expired meanwhile is left alone.
SUCCEEDED = """
for i = 1, #KEYS do
  if i <= tonumber(ARGV[1]) then
    redis.call('DEL', KEYS[i])
  elseif redis.call('EXISTS', KEYS[i]) == 1 and redis.call('DECR', KEYS[i]) <= 0 then
    redis.call('DEL', KEYS[i])
  end
end
return 0
"""


@dataclass(frozen=True)
class Rule:
    failures: int
    address_failures: int
    window_seconds: int
    lockout_seconds: int


def rule() -> Rule:
    config = settings.MEMPROJ_ADMIN_LOGIN_LOCKOUT
    return Rule(
        failures=max(0, int(config["FAILURES"])),
        address_failures=max(0, int(config["ADDRESS_FAILURES"])),
        # Redis expiries of at least a second: PX 0 is an error.
        window_seconds=max(1, int(config["WINDOW_SECONDS"])),
        lockout_seconds=max(1, int(config["LOCKOUT_SECONDS"])),
    )


def _scope() -> str:
    return f"{KEY_PREFIX}{connection.settings_dict['NAME']}:"


def _username_part(username: str) -> str:
    return "user:" + hashlib.sha256(username.encode("utf-8", "surrogatepass")).hexdigest()


def _address_part(address: str) -> str:
    return "addr:" + address


def _parts(username: str | None, address: str | None, limits: Rule) -> list[tuple[str, int]]:
    """(key part, limit) of each counter a login attempt falls under."""
    parts = []
    if username:
        parts.append((_username_part(username), limits.failures))
    if address:
        parts.append((_address_part(address), limits.address_failures))
    return parts


# --- Where the counts live -------------------------------------------------------------
# A pair: (counter key, lock key, limit).
Pair = tuple[str, str, int]


class _RedisCounts:
    def __init__(self, url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._attempt = self._client.register_script(ATTEMPT)
        self._succeeded = self._client.register_script(SUCCEEDED)

    def attempt(self, pairs: list[Pair], window_ms: int, lockout_ms: int) -> int:
        keys = [key for counter, lock, _ in pairs for key in (counter, lock)]
        return int(self._attempt(keys=keys, args=[window_ms, lockout_ms, *(limit for _, _, limit in pairs)]))

    def succeeded(self, drop: list[str], give_back: list[str]) -> None:
        self._succeeded(keys=[*drop, *give_back], args=[len(drop)])

    def clear(self, keys: list[str]) -> None:
        self._client.delete(*keys)


class _LocalCounts:
    """The same counts in this process's memory, while Redis is unreachable."""

    MAX_KEYS = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}  # counter -> (count, expires at)
        self._locks: dict[str, float] = {}  # lock -> locked until

    def locked_ms(self, locks: list[str]) -> int:
        now = time.monotonic()
        with self._lock:
            until = max([now, *(self._locks.get(lock, now) for lock in locks)])
        return math.ceil((until - now) * 1000)

    def attempt(self, pairs: list[Pair], window_ms: int, lockout_ms: int) -> int:
        now = time.monotonic()
        with self._lock:
            self._prune(now)
            until = max([now, *(self._locks.get(lock, now) for _, lock, _ in pairs)])
            if until > now:
                return math.ceil((until - now) * 1000)
            counted = []
            for counter, lock, limit in pairs:
                if limit <= 0:
                    continue
                count, expires = self._counts.get(counter, (0, 0.0))
                if expires <= now:
                    count, expires = 0, now + window_ms / 1000
                counted.append((counter, lock, count + 1 > limit, count, expires))
            if not any(over for _, _, over, _, _ in counted):
                for counter, _, _, count, expires in counted:
                    self._counts[counter] = (count + 1, expires)
                return 0
            for counter, lock, over, _, _ in counted:
                if over:
                    self._locks[lock] = now + lockout_ms / 1000
                    self._counts.pop(counter, None)
            return lockout_ms

    def succeeded(self, drop: list[str], give_back: list[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for counter in drop:
                self._counts.pop(counter, None)
            for counter in give_back:
                count, expires = self._counts.get(counter, (0, 0.0))
                if count > 1 and expires > now:
                    self._counts[counter] = (count - 1, expires)
                else:
                    self._counts.pop(counter, None)

    def clear(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._counts.pop(key, None)
                self._locks.pop(key, None)

    def clear_all(self) -> None:
        with self._lock:
            self._counts.clear()
            self._locks.clear()

    def _prune(self, now: float) -> None:
        if len(self._counts) + len(self._locks) < self.MAX_KEYS:
            return
        self._counts = {k: v for k, v in self._counts.items() if v[1] > now}
        self._locks = {k: v for k, v in self._locks.items() if v > now}


_redis: dict[str, _RedisCounts] = {}
_local = _LocalCounts()
_last_failure_log = [0.0]


def _counts() -> _RedisCounts:
    url = redis_url()
    found = _redis.get(url)
    if found is None:
        found = _redis[url] = _RedisCounts(url)
    return found


def _fallback(what: str) -> _LocalCounts:
    if time.monotonic() - _last_failure_log[0] > 60:
        _last_failure_log[0] = time.monotonic()
        logger.warning("login lockout: Redis unreachable (%s); counting in this process only", what, exc_info=True)
    return _local


# --- What the backend, the signal and the command call ------------------------------


def _pairs(username: str | None, address: str | None) -> list[Pair]:
    scope = _scope()
    return [(f"{scope}count:{part}", f"{scope}lock:{part}", limit) for part, limit in _parts(username, address, rule())]


def attempt(username: str | None, address: str | None) -> int:
    """Count a login attempt for ``username`` from ``address`` before its
    password is checked: 0 when it may go on, else the seconds the lockout
    that refuses it has left."""
    pairs = _pairs(username, address)
    if not pairs:
        return 0
    limits = rule()
    window_ms, lockout_ms = limits.window_seconds * 1000, limits.lockout_seconds * 1000
    # A lockout this process counted while Redis was unreachable still holds.
    remaining = _local.locked_ms([lock for _, lock, _ in pairs])
    if not remaining:
        try:
            remaining = _counts().attempt(pairs, window_ms, lockout_ms)
        except Exception:  # noqa: BLE001 - any Redis failure: the process's own counts
            remaining = _fallback("attempt").attempt(pairs, window_ms, lockout_ms)
    return math.ceil(remaining / 1000)


def succeeded(username: str, address: str | None) -> None:
    """A login succeeded: its username's count is dropped, and its address
    (``None`` when its attempt was not counted) gets that attempt back."""
    scope = _scope()
    drop = [f"{scope}count:{_username_part(username)}"]
    give_back = [f"{scope}count:{_address_part(address)}"] if address else []
    _local.succeeded(drop, give_back)
    try:
        _counts().succeeded(drop, give_back)
    except Exception:  # noqa: BLE001 - the login has succeeded; never fail it here
        _fallback("success")


def unlock(*, username: str | None = None, address: str | None = None) -> None:
    """Lift the lockout and drop the count of a username and/or an address."""
    keys = [key for counter, lock, _ in _pairs(username, address) for key in (counter, lock)]
    if keys:
        _local.clear(keys)
        _counts().clear(keys)


def _address(request: HttpRequest | None) -> str | None:
    """The client address the rate limiter counts by (REMOTE_ADDR: the
    connection's, or a trusted proxy's X-Forwarded-For)."""
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


class LoginLockoutBackend:
    """Counts a login attempt, or refuses it while its username or client
    address is locked; checks no password (ModelBackend, next in
    AUTHENTICATION_BACKENDS, does). Without ``get_user`` it holds no sessions:
    logged-in users stay ModelBackend's."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        seconds = attempt(username, _address(request))
        if seconds:
            if request is not None:
                setattr(request, LOCKED_ATTRIBUTE, seconds)
            raise PermissionDenied("login locked")
        if request is not None:
            setattr(request, COUNTED_ATTRIBUTE, True)
        return None


def locked_by_lockout(request: HttpRequest | None) -> int:
    """The seconds of the lockout that refused this request's login; 0 if none did."""
    seconds = getattr(request, LOCKED_ATTRIBUTE, 0) if request is not None else 0
    return int(seconds)


@receiver(user_logged_in, dispatch_uid="memproj_login_lockout")
def _logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    counted = request is not None and getattr(request, COUNTED_ATTRIBUTE, False)
    succeeded(user.get_username(), _address(request) if counted else None)


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's login form: a locked login says so (the same words for any
    username), instead of the wrong-password error it would otherwise show."""

    def get_invalid_login_error(self) -> ValidationError:
        seconds = locked_by_lockout(self.request)
        if not seconds:
            return super().get_invalid_login_error()
        minutes = max(1, math.ceil(seconds / 60))
        return ValidationError(
            "Too many failed logins for this username or from this address: logging in is refused for "
            f"{minutes} more minute{'s' if minutes != 1 else ''}, even with the right password. Try again then.",
            code="locked",
        )
