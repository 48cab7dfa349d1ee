from django.core.management.base import BaseCommand, CommandParser

from policy.services.tokens import token_issue


class Command(BaseCommand):
    help = "Create the tenant and principal if missing and print a new API token (last line of stdout)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--principal", required=True)
        parser.add_argument("--role", choices=["member", "admin"], default="member")
        parser.add_argument("--scopes", default="", help="comma-separated, e.g. read,write,elevate,toolset:memory")
        parser.add_argument("--name", default="")

    def handle(self, *args: object, **options: str) -> None:
        scopes = [s for s in options["scopes"].split(",") if s] or None
        issued = token_issue(
            tenant_slug=options["tenant"],
            principal_name=options["principal"],
            role=options["role"],
            scopes=scopes,
            name=options["name"],
        )
        if issued.created_tenant:
            self.stderr.write(f"created tenant {options['tenant']}")
        if issued.created_principal:
            self.stderr.write(f"created principal {options['principal']} ({options['role']})")
        self.stdout.write(issued.token)
