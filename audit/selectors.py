from dataclasses import dataclass

from django.db.models import QuerySet

from audit.hashing import GENESIS_HASH, event_hash, hashed_fields
from audit.models import AuditEvent
from core.db import distinct_values


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
    """The filters' choices, each read off the index that starts with its column (the log only grows)."""
    return {
        "actors": distinct_values(AuditEvent, "actor_name"),
        "actions": distinct_values(AuditEvent, "action"),
        "object_types": distinct_values(AuditEvent, "object_type"),
    }


@dataclass(frozen=True)
class ChainCheck:
    checked: int
    broken_event_id: int | None  # the first event that breaks the chain; None when intact or an anchor is missing
    reason: str = ""  # why the chain is broken; empty when intact
    head_id: int | None = None  # the newest event checked
    head_hash: str = GENESIS_HASH

    @property
    def intact(self) -> bool:
        return not self.reason


def audit_verify_chain(*, anchor: str = "") -> ChainCheck:
    """Walk events oldest first (in bounded memory); report the first whose link or content hash does not match.

    A chain whose newest events were deleted is still a valid chain: only a head recorded earlier, outside the
    database, shows it. `anchor` is such a hash: the check fails when no event has it.
    """
    prev = GENESIS_HASH
    count = 0
    head_id = None
    # The genesis hash is the head of an empty log (what `verify_audit --show-head` prints before any event).
    anchored = not anchor or anchor == GENESIS_HASH
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        count += 1
        if event.prev_hash != prev:
            if count == 1:
                reason = (
                    "it is the oldest event left but does not start from the genesis hash (older events were removed)"
                )
            else:
                reason = (
                    "its prev_hash does not match the previous event's hash"
                    " (an event was removed, inserted or reordered here)"
                )
            return ChainCheck(count, event.pk, reason, head_id, prev)
        if event_hash(prev_hash=event.prev_hash, fields=hashed_fields(event)) != event.hash:
            return ChainCheck(
                count, event.pk, "its content does not match its hash (the event was altered)", head_id, prev
            )
        prev = event.hash
        head_id = event.pk
        anchored = anchored or event.hash == anchor
    if not anchored:
        return ChainCheck(
            count,
            None,
            f"the anchored event (hash {anchor}) is not in the log; events were removed from its end,"
            " or the log was rewritten",
            head_id,
            prev,
        )
    return ChainCheck(count, None, "", head_id, prev)
