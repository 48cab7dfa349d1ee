#!/usr/bin/env python
import os
import sys

# Commands that never open a connection (``check`` skips database checks unless asked).
NO_SERVERS = {"check", "help", "--help", "-h", "version", "--version", "makemigrations", "diffsettings", "startapp"}


def unmigrated_hint(exc: BaseException) -> str | None:
    """The message for a command run against a database that lacks tables
    (never migrated, or migrations pending), else None."""
    import psycopg
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    if not isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
        return None
    connection.close()  # the failed statement may have left a transaction aborted
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if not pending:
        return None
    what = "has never been migrated" if not executor.recorder.has_table() else f"lacks {len(pending)} migrations"
    return f"memproj: the database {what}. Run `make migrate` (or `python manage.py migrate`) first, then try again.\n"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    from django.core.management import execute_from_command_line
    from django.db import ProgrammingError

    # Importing the settings starts nothing; a command that may touch the
    # database or the broker starts the embedded servers first.
    if len(sys.argv) > 1 and sys.argv[1] not in NO_SERVERS:
        import django

        django.setup()
        from memproj.embedded import ensure_for_settings

        ensure_for_settings()
    try:
        execute_from_command_line(sys.argv)
    except ProgrammingError as exc:
        hint = unmigrated_hint(exc)
        if hint is None:
            raise
        sys.stderr.write(hint)
        sys.exit(1)


if __name__ == "__main__":
    main()
