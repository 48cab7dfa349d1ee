#!/usr/bin/env python
import os
import sys


# Commands that never open a connection (``check`` skips database checks unless asked).
NO_SERVERS = {"check", "help", "--help", "-h", "version", "--version", "makemigrations", "diffsettings", "startapp"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    from django.core.management import execute_from_command_line

    # Importing the settings starts nothing; a command that may touch the
    # database or the broker starts the embedded servers first.
    if len(sys.argv) > 1 and sys.argv[1] not in NO_SERVERS:
        import django

        django.setup()
        from memproj.embedded import ensure_for_settings

        ensure_for_settings()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
