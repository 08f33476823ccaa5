"""The cyclic garbage collector, set for a long-running server once its startup is done.

Why: by default CPython runs a young collection after every 700 net allocations of container objects, and
a full one every 100 young collections or so, once the objects promoted since the last full one pass a
quarter of the long-lived ones. A gateway worker holds ~90,000 long-lived objects (Django, the settings,
the snapshot) that never become garbage, and every in-flight request's objects are promoted by the young
collections they live through. Under load that was a full collection of ~90,000 objects every couple of
seconds, about 20 µs of CPU per request in all (docs/performance.md). Requests free their own objects by
reference counting: the collector finds almost nothing (a few redis-py objects a minute).

So, once startup is done: collect, then freeze what is alive (moved to a permanent generation that
collections never traverse), and raise the young threshold so a collection runs every `young` net
allocations instead of every 700. Cyclic garbage still gets collected, just less often: at most about
`young` container objects (a few MiB) wait for it.
"""

from __future__ import annotations

import gc


def settle_heap(young: int) -> None:
    """Freeze the objects alive now out of the collector's view and run young collections every `young` net
    container allocations (the older generations keep CPython's ratios). 0 leaves the collector alone."""
    if young <= 0:
        return
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
