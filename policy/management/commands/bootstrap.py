import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from policy.models import Principal, Tenant
from policy.services.tokens import token_issue


class Command(BaseCommand):
    help = "First run: create a tenant, an admin user and an API token if none exist (printed once)."

    def handle(self, *args: object, **options: object) -> None:
        if Tenant.objects.exists():
            self.stdout.write("memproj is already set up (a tenant exists); nothing to do.")
            return
        with transaction.atomic():
            issued = token_issue(tenant_slug="default", principal_name="admin", role="admin", name="bootstrap")
            password = secrets.token_urlsafe(12)
            user = get_user_model().objects.create_superuser("admin", "", password)
            Principal.objects.filter(pk=issued.api_token.principal_id).update(user=user)
        self.stdout.write(
            "\nmemproj is set up. Keep these; they are shown only once:\n"
            f"  admin login:  admin / {password}   (http://127.0.0.1:8000/admin/)\n"
            f"  API token:    {issued.token}\n"
        )
