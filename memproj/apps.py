from django.apps import AppConfig


class MemprojConfig(AppConfig):
    """The project itself, as an app only for its system checks."""

    name = "memproj"
    verbose_name = "memproj"

    def ready(self) -> None:
        from memproj import checks  # noqa: F401 - registers the checks
