from django.db import models


class AuditEvent(models.Model):
    """Append-only record of a change. Never updated or deleted (PostgreSQL triggers refuse UPDATE, DELETE and
    TRUNCATE)."""

    created_at = models.DateTimeField()
    # A plain id, not a foreign key: deleting a user must neither change an event (SET NULL would
    # break the hash chain, and PostgreSQL's trigger refuses it) nor be blocked by the audit log.
    actor_id = models.BigIntegerField(null=True)
    # Kept as text so the event still names its actor after the user is deleted.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    # A primary key, or a circuit's "provider/model" (names of up to 64 and 128 characters).
    object_id = models.CharField(max_length=200)
    object_repr = models.CharField(max_length=200, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # Audit Log filters: by actor, by action, by object; each newest first.
            models.Index(fields=["actor_name", "-id"], name="audit_actor_idx"),
            models.Index(fields=["action", "-id"], name="audit_action_idx"),
            models.Index(fields=["object_type", "object_id", "-id"], name="audit_object_idx"),
        ]
        constraints = [
            # One event continues each event: the database refuses a fork of the chain, whoever writes and
            # whatever the isolation level (under REPEATABLE READ a writer's snapshot may predate the head).
            models.UniqueConstraint(fields=["prev_hash"], name="audit_prev_hash_unique"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_type}:{self.object_id}"
        )
