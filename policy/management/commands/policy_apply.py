import json
import sys
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policy.admin_access import ADMIN_SCOPES
from policy.caller import Caller
from policy.document import excerpt
from policy.errors import PolicyError
from policy.models import Tenant
from policy.services.policies import policy_apply


class Command(BaseCommand):
    help = (
        "Apply a policy YAML to a tenant (pce-memory's policy.apply) as the operator. Prints the result as JSON; "
        "--dry-run and --validate-only store nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--file", required=True, help="policy YAML file, or - for stdin")
        parser.add_argument("--dry-run", action="store_true", help="report what would change, store nothing")
        parser.add_argument("--validate-only", action="store_true", help="check the policy, store nothing")
        parser.add_argument("--expected-version", default=None, help="refuse unless this is the current version")
        parser.add_argument("--approver", default="", help="who approved this change (recorded in the audit)")
        parser.add_argument("--signature", default=None, help="hex HMAC-SHA256 of the file under the tenant key")

    def handle(self, *args: object, **options: object) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"[NOT_FOUND] no tenant with the slug {excerpt(options['tenant'])}")
        path = str(options["file"])
        try:
            # Exact bytes (no newline translation): a signature covers them as they are.
            if path == "-":
                text = sys.stdin.buffer.read().decode("utf-8")
            else:
                with open(path, encoding="utf-8", newline="") as handle:
                    text = handle.read()
        except OSError as exc:
            # OSError's own text quotes the path as Python's repr: say the reason alone.
            raise CommandError(f"cannot read {path}: {(exc.strerror or 'not readable').lower()}") from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"cannot read {path}: not UTF-8 text (at byte {exc.start})") from None
        # The operator acts as an admin of the tenant with no principal; the
        # audit row names the operator as "manage.py policy_apply".
        operator = Caller(tenant_id=tenant.id, principal_id=None, role="admin", scopes=ADMIN_SCOPES)
        try:
            result = policy_apply(
                caller=operator,
                yaml=text,
                dry_run=bool(options["dry_run"]),
                validate_only=bool(options["validate_only"]),
                expected_version=options["expected_version"] or None,  # type: ignore[arg-type]
                signature=options["signature"] or None,  # type: ignore[arg-type]
                approver=str(options["approver"] or ""),
                actor_name="manage.py policy_apply",
            )
        except PolicyError as exc:
            raise CommandError(f"[{exc.code}] {exc}") from None
        self.stdout.write(json.dumps(asdict(result), indent=2, ensure_ascii=False, default=str))
