from django.apps import AppConfig


class PolicyConfig(AppConfig):
    name = "policy"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        # The admin login lockout hears of successful logins (Django's user_logged_in).
        from policy import loginlock  # noqa: F401
