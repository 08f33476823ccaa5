"""The request-log stream contract shared by the writers (gateway sinks) and the reader (the ingest).

It lives here, below the gateway: the gateway imports it to write, `requestlogs.ingest` and the
selectors read with it, and neither side imports the other's code.

An entry holds one record under `RECORD_FIELD`, as orjson-encoded JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

STREAM_KEY = "cp:requestlogs"
RECORD_FIELD = "r"  # the stream entry's field that holds the JSON record
DEFAULT_MAXLEN = 1_000_000  # about 730 bytes an entry in Redis: ~0.7 GiB at the cap
# The dead-letter stream keeps the newest entries for inspection (approximately; every entry is also logged and
# counted in `<stream>:dead_lettered`), so a flood of bad records cannot fill Redis either.
DEAD_LETTER_MAXLEN = 100_000


@dataclass(frozen=True)
class StreamKeys:
    """The Redis keys of one request-log stream and its counters."""

    stream: str

    @property
    def trimmed(self) -> str:  # entries the length cap removed before they were ingested
        return f"{self.stream}:trimmed"

    @property
    def dropped(self) -> str:  # records gateways dropped because their buffer was full
        return f"{self.stream}:dropped"

    @property
    def lost_since(self) -> str:  # unix time of the first loss counted in either
        return f"{self.stream}:lost_since"

    @property
    def dead(self) -> str:  # dead-letter stream: records that cannot be decoded or stored
        return f"{self.stream}:dead"

    @property
    def dead_lettered(self) -> str:
        return f"{self.stream}:dead_lettered"
