"""The one beat table: every periodic task is declared here as data. Each entry's cadence is a five-field
crontab string ("minute hour day-of-month month day-of-week") that an
environment variable may override; "off" disables the entry. Every run
expires just under its period, so a backlog of beat messages (beat running
while the workers were down) collapses instead of piling up.

Imported by the settings, so nothing here may import Django models."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.schedules import crontab


@dataclass(frozen=True)
class BeatEntry:
    name: str
    task: str
    env_var: str
    default: str
    purpose: str


SCHEDULE: tuple[BeatEntry, ...] = (
    BeatEntry(
        "followups-drain",
        "workers.tasks.followups_drain_task",
        "MEMPROJ_BEAT_FOLLOWUPS",
        "* * * * *",
        "run follow-ups of committed writes that never reached a worker (broker down, task lost)",
    ),
    BeatEntry(
        "embeddings-retry",
        "workers.tasks.embeddings_retry_task",
        "MEMPROJ_BEAT_EMBEDDINGS_RETRY",
        "* * * * *",
        "embed memories still pending (embedder was down, async mode, retries exhausted)",
    ),
    BeatEntry(
        "episodes-consolidate",
        "workers.tasks.episodes_consolidate_task",
        "MEMPROJ_BEAT_CONSOLIDATE",
        "*/30 * * * *",
        "cluster unconsolidated episodes into candidate facts and rules",
    ),
    BeatEntry(
        "memories-expire",
        "workers.tasks.memories_expire_task",
        "MEMPROJ_BEAT_EXPIRE",
        "7 * * * *",
        "delete memories (episodes, facts and rules of a scope with a TTL) whose TTL passed more than the "
        "retention period ago",
    ),
    BeatEntry(
        "facts-decay",
        "workers.tasks.facts_decay_task",
        "MEMPROJ_BEAT_DECAY",
        "37 * * * *",
        "record fact state changes (active / fading / expired) as confidence decays",
    ),
    BeatEntry(
        "rules-maturity",
        "workers.tasks.rules_maturity_task",
        "MEMPROJ_BEAT_MATURITY",
        "17 3 * * *",
        "promote rules whose age now qualifies them (proven needs 30 days)",
    ),
    BeatEntry(
        "memories-reembed",
        "workers.tasks.memories_reembed_task",
        "MEMPROJ_BEAT_REEMBED",
        "47 3 * * *",
        "re-embed memories whose vector came from another embedding model",
    ),
    BeatEntry(
        "collections-lifecycle",
        "workers.tasks.collections_lifecycle_task",
        "MEMPROJ_BEAT_LIFECYCLE",
        "*/15 * * * *",
        "roampal lifecycle: promote, demote or delete scored memories (working/history/patterns)",
    ),
    BeatEntry(
        "transcripts-retention",
        "workers.tasks.transcripts_retention_task",
        "MEMPROJ_BEAT_TRANSCRIPTS",
        "27 * * * *",
        "delete hooked-conversation exchange transcripts older than 7 days",
    ),
    BeatEntry(
        "active-contexts-expire",
        "workers.tasks.active_contexts_expire_task",
        "MEMPROJ_BEAT_ACTIVE_CONTEXTS",
        "*/10 * * * *",
        "delete pce active contexts whose MEMPROJ_ACTIVE_CONTEXT_TTL_SECONDS has passed",
    ),
    BeatEntry(
        "idempotency-keys-expire",
        "workers.tasks.idempotency_keys_expire_task",
        "MEMPROJ_BEAT_IDEMPOTENCY_KEYS",
        "53 * * * *",
        "delete idempotency keys of writes whose MEMPROJ_IDEMPOTENCY_TTL_SECONDS has passed",
    ),
)


def parse_crontab(value: str) -> crontab:
    fields = value.split()
    if len(fields) != 5:
        raise ValueError(f"a beat cadence needs five crontab fields, got {value!r}")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year, day_of_week=day_of_week
    )


def shortest_period(schedule: crontab) -> timedelta:
    """The smallest gap between two consecutive runs, exact for any crontab:
    the gaps inside one day, and from one matching day's last run to the next
    matching day's first run over a year of days."""
    cron: Any = schedule  # celery-types does not declare the parsed field sets
    minutes = sorted(h * 60 + m for h in cron.hour for m in cron.minute)
    gaps = [b - a for a, b in zip(minutes, minutes[1:], strict=False)]
    start = datetime(2025, 1, 6)  # a Monday; a year covers every month and weekday
    days = [
        offset
        for offset in range(366 + 31)
        if (day := start + timedelta(days=offset)).month in cron.month_of_year
        and day.day in cron.day_of_month
        and day.isoweekday() % 7 in cron.day_of_week  # celery: 0 = Sunday
    ]
    gaps += [(b - a) * 1440 - minutes[-1] + minutes[0] for a, b in zip(days, days[1:], strict=False)]
    return timedelta(minutes=min(gaps)) if gaps else timedelta(days=365)


def expires_for(period: timedelta) -> float:
    """Just under the period: a run still queued when the next one is due is dropped."""
    seconds = period.total_seconds()
    return max(30.0, seconds - max(30.0, seconds * 0.05))


def beat_schedule(environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    env = os.environ if environ is None else environ
    table: dict[str, dict[str, Any]] = {}
    for entry in SCHEDULE:
        cadence = env.get(entry.env_var, "").strip() or entry.default
        if cadence.lower() in {"off", "disabled", "none"}:
            continue
        schedule = parse_crontab(cadence)
        table[entry.name] = {
            "task": entry.task,
            "schedule": schedule,
            "options": {"expires": expires_for(shortest_period(schedule))},
        }
    return table
