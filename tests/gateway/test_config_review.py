"""The worker's configuration, metrics and start, at their edges: the version poll that catches a missed publication
(a revoked key), however Redis's counter compares with this process's version; the policy's failed attempts on
`/metrics` by their status class; an earlier start's metrics directory under this very pid. Each failed before its
fix (round twenty-eight's review), but the control with a counter ahead of the worker."""

import threading
import uuid
from contextlib import contextmanager

import httpx
import pytest
import redis
from django.utils import timezone

import gateway.config as config_module
import gateway.metrics as metrics_module
from gateway.config import ConfigHolder, wait_for_version
from tests.gateway.resilience_helpers import FAST, rig
from tests.gateway.test_metrics import labelled, parse

ATTEMPTS = "controlplane_gateway_upstream_attempt_duration_seconds_count"


# --- metrics: an upstream error status on the resilient path is labelled `other`, not its status class ----------


@pytest.mark.parametrize(("status", "label"), [(503, "5xx"), (429, "429")])
def test_resilient_retry_of_an_upstream_status_is_labelled_by_its_status_class(world, status, label):
    with rig(world, FAST) as r:
        r.fault("openai", mode="status", status=status, fail_first=1)
        response = r.post()
        log = r.log()
        samples = parse(httpx.get(f"{r.url}/metrics", timeout=10).text)

    assert response.status_code == 200
    assert [a["status"] for a in log.attempts] == [status, 200]  # the request log knows the status
    outcomes = labelled(samples, ATTEMPTS, "provider", "model", "outcome")
    # docs/metrics.md: outcome is 2xx, 3xx, 4xx, 429, 5xx, timeout, ... -- the failed call is a `label`.
    assert outcomes == {("openai", "gpt-4o", label): 1, ("openai", "gpt-4o", "2xx"): 1}


@pytest.mark.parametrize(
    ("error", "status", "label"),
    [
        ("upstream_status", 503, "5xx"),
        ("upstream_status", 429, "429"),
        ("upstream_status", 404, "4xx"),
        ("first_token_timeout", None, "timeout"),
        ("idle_timeout", 200, "timeout"),
        ("connect_timeout", None, "timeout"),
        ("deadline", 200, "timeout"),
        ("stream_incomplete", 200, "connection_error"),
        ("stream_interrupted", 200, "connection_error"),
        ("untranslatable", None, "other"),
        (None, 200, "2xx"),
    ],
)
def test_every_error_of_the_policys_attempts_has_the_outcome_class_of_the_default_rule(error, status, label):
    """The resilience policy's attempts name their error finely: each counts under the class the default rule's
    would (they were all `other` but the default rule's own kinds)."""
    assert metrics_module._outcome({"error": error, "status": status}) == label


# --- config: the version poll compares against a version the holder invented --------------------------------------


class CountingPolls:
    """Wraps ConfigHolder._read_remote (or another method) so a test can wait for N more calls (no sleeps)."""

    def __init__(self, holder, name="_read_remote"):
        self._original = getattr(holder, name)
        self._cond = threading.Condition()
        self.count = 0
        setattr(holder, name, self)

    def __call__(self):
        value = self._original()
        with self._cond:
            self.count += 1
            self._cond.notify_all()
        return value

    def wait_total(self, n, timeout=30):
        with self._cond:
            assert self._cond.wait_for(lambda: self.count >= n, timeout=timeout)

    def wait_more(self, n, timeout=30):
        with self._cond:
            target = self.count + n
            assert self._cond.wait_for(lambda: self.count >= target, timeout=timeout)


@pytest.fixture
def bus_namespace(monkeypatch):
    """A private version key and channel on the shared Redis."""
    ns = f"test:review-c:{uuid.uuid4().hex}"
    monkeypatch.setattr(config_module, "VERSION_KEY", f"{ns}:version")
    monkeypatch.setattr(config_module, "CHANNEL", f"{ns}:channel")
    yield ns
    redis.Redis.from_url(_redis_url()).delete(f"{ns}:version")


def _redis_url():
    import os

    return os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@contextmanager
def _holder(counter: int | None):
    """A started holder polling the version key every 20 ms (its full rebuild far away: what is tested is the poll,
    the net for missed publications), with Redis's counter at `counter` (unset: None) and its start's rebuilds done;
    and a wrapper counting its polls."""
    if counter is not None:
        redis.Redis.from_url(_redis_url()).set(config_module.VERSION_KEY, counter)
    holder = ConfigHolder(redis_url=_redis_url(), poll_seconds=0.02, full_rebuild_seconds=3600)
    polls = CountingPolls(holder)
    reloads = CountingPolls(holder, "reload")
    holder.start()
    try:
        # The start's rebuild, then the one the subscriber's connect announces: let both pass.
        reloads.wait_total(2)
        assert wait_for_version(holder, counter or 1, 10)
        yield holder, polls
    finally:
        holder.stop()


def _revoke_and_miss_its_publication(world, client, published: int, polls: CountingPolls) -> None:
    """The console revokes the key and counts the change (INCR); its PUBLISH message is missed (the subscriber was
    reconnecting). Then ten polls of the version key: the rebuild a changed counter starts is done by the second."""
    world.key.revoked_at = timezone.now()
    world.key.save(update_fields=["revoked_at"])
    assert client.incr(config_module.VERSION_KEY) == published
    polls.wait_more(10)


def test_version_poll_catches_a_missed_publication_while_the_redis_counter_is_unset(world, bus_namespace):
    """No publication yet (a fresh Redis): the subscriber's connect announces 0, which the holder makes a version of
    its own, 1; the revocation's INCR makes Redis's 1 too. It compared the two and waited for the 60 s rebuild."""
    client = redis.Redis.from_url(_redis_url())
    with _holder(None) as (holder, polls):
        served_before = world.key.hashed_secret in holder.current.keys
        _revoke_and_miss_its_publication(world, client, 1, polls)
        assert (served_before, holder.current.version) == (True, 1)
        assert world.key.hashed_secret not in holder.current.keys


def test_control_version_poll_catches_a_missed_publication_when_the_counter_is_ahead(world, bus_namespace):
    """The same steps with the counter ahead of the worker's version: the poll did its job before too."""
    client = redis.Redis.from_url(_redis_url())
    with _holder(5) as (holder, polls):
        _revoke_and_miss_its_publication(world, client, 6, polls)
        assert world.key.hashed_secret not in holder.current.keys


def test_version_poll_catches_a_missed_publication_after_redis_lost_its_counter(world, bus_namespace):
    """Redis restarted without persistence: its counter starts again below the gateway's version."""
    client = redis.Redis.from_url(_redis_url())
    with _holder(5) as (holder, polls):
        client.delete(config_module.VERSION_KEY)  # the restart: the counter is gone
        _revoke_and_miss_its_publication(world, client, 1, polls)
        assert world.key.hashed_secret not in holder.current.keys


# --- run_gateway: a dead earlier start whose pid is now ours (pid 1 in a restarted container) is never removed ----


def test_metrics_dir_removes_an_earlier_start_whose_pid_was_reused(settings, tmp_path):
    import os

    from gateway.management.commands.run_gateway import metrics_dir

    settings.VAR_DIR = tmp_path
    parent = tmp_path / "gateway-metrics"
    earlier = parent / f"run-{os.getpid()}-earlier"  # the previous container start, same pid, now gone
    earlier.mkdir(parents=True)
    (earlier / "counter_7.db").write_bytes(b"\0" * 16)

    fresh = metrics_dir()

    assert fresh != str(earlier)
    assert not earlier.exists()
