from django.apps import AppConfig
from django.db.models.signals import post_migrate


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memories"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from memory.retrieval import use_channel_session
        from memproj import pgtypes
        from memproj.dbroles import grant_app_privileges

        pgtypes.connect()
        connection_created.connect(use_channel_session, dispatch_uid="memory.retrieval.channel_session")

        # After every migrate, as the owner: the app role's table privileges.
        post_migrate.connect(grant_app_privileges, sender=self, dispatch_uid="memproj.grant_app_privileges")
