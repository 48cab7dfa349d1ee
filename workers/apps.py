from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"

    def ready(self) -> None:
        # The core records follow-ups (memory/services/followups.py) without knowing
        # how they travel; Celery carries them. Registered here so that memory
        # imports nothing from workers. retry=False: a write's enqueue must not
        # stall on a dead broker; the drain sweep picks the row up instead.
        from memory.models import FollowUpKind
        from memory.services.followups import followup_register
        from workers import tasks

        # One embed task per batch of ids (one model call); a conflict check per memory.
        followup_register(
            FollowUpKind.EMBED,
            lambda ids, bulk: tasks.enqueue(tasks.embed_memories_task, (ids,), retry=False, **tasks.priority(bulk)),
        )
        followup_register(
            FollowUpKind.CONFLICT_CHECK,
            lambda ids, bulk: [
                tasks.enqueue(tasks.memory_conflict_check_task, (pk,), retry=False, **tasks.priority(bulk))
                for pk in ids
            ],
        )
