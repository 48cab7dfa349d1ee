import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from memproj.embedded import VAR_DIR
from policy.models import Principal, Tenant
from policy.services.tokens import token_issue


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by this OS user only (directory 0700, file 0600),
    never through a moment where it is readable by others."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


class Command(BaseCommand):
    help = (
        "First run: create a tenant, an admin user and an API token if none exist. The credentials go to a "
        "file only this OS user may read (var/secrets/bootstrap.txt); the output names the file, never a secret "
        "(it ends up in supervisor logs)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--credentials-file",
            type=Path,
            default=VAR_DIR / "secrets" / "bootstrap.txt",
            help="where to write the admin login and the API token (default: var/secrets/bootstrap.txt)",
        )

    def handle(self, *args: object, **options: Any) -> None:
        if Tenant.objects.exists():
            self.stdout.write("memproj is already set up (a tenant exists); nothing to do.")
            return
        path: Path = options["credentials_file"].resolve()
        with transaction.atomic():
            issued = token_issue(tenant_slug="default", principal_name="admin", role="admin", name="bootstrap")
            password = secrets.token_urlsafe(12)
            user = get_user_model().objects.create_superuser("admin", "", password)
            Principal.objects.filter(pk=issued.api_token.principal_id).update(user=user)
            # In the transaction: a failed write leaves no admin whose password nobody has.
            write_private(
                path,
                "memproj's first admin and API token (shown nowhere else; delete this file once you keep them):\n"
                f"admin login: admin / {password}   ({settings.MEMPROJ_PUBLIC_URL.rstrip('/')}/admin/)\n"
                f"API token: {issued.token}\n",
            )
        self.stdout.write(
            f"\nmemproj is set up. The admin login and an API token are in {path} (readable by this OS user only).\n"
        )
