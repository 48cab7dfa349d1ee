from django.core.management.base import BaseCommand, CommandError, CommandParser

from policy.admin_access import ADMIN_SCOPES
from policy.caller import Caller
from policy.document import excerpt
from policy.errors import PolicyError
from policy.models import Tenant
from policy.services.signing import signing_key_clear, signing_key_set


class Command(BaseCommand):
    help = (
        "Set (print once) or clear a tenant's policy signing key. With a key set, policy_apply needs "
        "--signature = hex HMAC-SHA256 of the YAML under the key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("action", choices=["set", "clear"])

    def handle(self, *args: object, **options: object) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"[NOT_FOUND] no tenant with the slug {excerpt(options['tenant'])}")
        operator = Caller(tenant_id=tenant.id, principal_id=None, role="admin", scopes=ADMIN_SCOPES)
        try:
            if options["action"] == "set":
                self.stdout.write(signing_key_set(caller=operator, actor_name="manage.py policy_signing_key"))
            else:
                cleared = signing_key_clear(caller=operator, actor_name="manage.py policy_signing_key")
                self.stdout.write("cleared" if cleared else "no key was set")
        except PolicyError as exc:
            raise CommandError(f"[{exc.code}] {exc}") from None
