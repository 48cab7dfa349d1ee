from django.core.management.base import BaseCommand, CommandError, CommandParser

from policy.loginlock import unlock


class Command(BaseCommand):
    help = (
        "Lift the admin login lockout of a username and/or a client address before it ends, and drop its "
        "failed-login count (MEMPROJ_ADMIN_LOGIN_*)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", default=None, help="the login's username")
        parser.add_argument("--address", default=None, help="a client address, e.g. 203.0.113.7")

    def handle(self, *args: object, **options: str | None) -> None:
        username, address = options["username"], options["address"]
        if not username and not address:
            raise CommandError("name a username, an --address, or both.")
        try:
            unlock(username=username, address=address)
        except Exception as exc:  # noqa: BLE001 - Redis unreachable: say so, no traceback
            raise CommandError(f"could not reach the lockout's Redis: {exc}") from exc
        lifted = " and ".join(
            part for part in (username and f"username {username!r}", address and f"address {address}") if part
        )
        self.stdout.write(f"unlocked {lifted}")
