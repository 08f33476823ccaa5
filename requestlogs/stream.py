"""The request-log stream contract shared by the writers (gateway sinks) and the reader (the ingest).

It lives here, below the gateway: the gateway imports it to write, `requestlogs.ingest` and the
selectors read with it, and neither side imports the other's code.

An entry holds one batch of records: `BATCH_FIELD`, an orjson-encoded JSON array of record objects, and
`COUNT_FIELD`, how many (decimal), so that Redis can count records without decoding them. One entry per batch
rather than per record: Redis appends a 500-record batch in one command instead of 500, and the ingest
acknowledges and deletes one id instead of 500. `<stream>:records` counts the records held in batch entries
(added by the appending script, taken off by whatever deletes an entry), so the cap is in records.

Entries of the first format hold one record under `RECORD_FIELD`; the ingest still reads them (a gateway of an
earlier release, during a rolling upgrade). They are not counted in `<stream>:records`.
"""

from __future__ import annotations

from dataclasses import dataclass

STREAM_KEY = "cp:requestlogs"
BATCH_FIELD = "b"  # the stream entry's field that holds the JSON array of records
COUNT_FIELD = "n"  # ... and the number of records in it
RECORD_FIELD = "r"  # the first format's field: one JSON record an entry
# Records in one entry at most: a writer's batches are no larger, so a reader taking N entries takes at most
# N * ENTRY_RECORDS_MAX records.
ENTRY_RECORDS_MAX = 500
DEFAULT_MAXLEN = 1_000_000  # records; about 790 bytes each in Redis: ~0.8 GiB at the cap
# The dead-letter stream keeps the newest entries for inspection (approximately; every entry is also logged and
# counted in `<stream>:dead_lettered`), so a flood of bad records cannot fill Redis either.
DEAD_LETTER_MAXLEN = 100_000


@dataclass(frozen=True)
class StreamKeys:
    """The Redis keys of one request-log stream and its counters."""

    stream: str

    @property
    def records(self) -> str:  # records in the stream's batch entries, not yet ingested
        return f"{self.stream}:records"

    @property
    def trimmed(self) -> str:  # records the cap removed before they were ingested
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
