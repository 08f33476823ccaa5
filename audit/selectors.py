from dataclasses import dataclass

from django.db.models import QuerySet

from audit.hashing import GENESIS_HASH, event_hash, hashed_fields
from audit.models import AuditEvent


def audit_event_list(
    *, actor: str = "", action: str = "", object_type: str = "", object_id: str = ""
) -> QuerySet[AuditEvent]:
    """Events newest first, filtered by exact actor name, action, object type and id."""
    qs = AuditEvent.objects.order_by("-id")
    if actor:
        qs = qs.filter(actor_name=actor)
    if action:
        qs = qs.filter(action=action)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if object_id:
        qs = qs.filter(object_id=object_id)
    return qs


def audit_filter_options() -> dict[str, list[str]]:
    return {
        "actors": list(AuditEvent.objects.order_by("actor_name").values_list("actor_name", flat=True).distinct()),
        "actions": list(AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct()),
        "object_types": list(
            AuditEvent.objects.order_by("object_type").values_list("object_type", flat=True).distinct()
        ),
    }


@dataclass(frozen=True)
class ChainCheck:
    checked: int
    broken_event_id: int | None
    reason: str = ""


def audit_verify_chain() -> ChainCheck:
    """Walk events oldest first; report the first whose link or content hash does not match."""
    prev = GENESIS_HASH
    count = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        count += 1
        if event.prev_hash != prev:
            return ChainCheck(
                count,
                event.pk,
                "its prev_hash does not match the previous event's hash (an event was removed or reordered)",
            )
        if event_hash(prev_hash=event.prev_hash, fields=hashed_fields(event)) != event.hash:
            return ChainCheck(count, event.pk, "its content does not match its hash (the event was altered)")
        prev = event.hash
    return ChainCheck(count, None)
