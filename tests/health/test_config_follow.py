"""A Redis engine follows the thresholds and holds it is told of, including those it could not hear or read at
the time: a change published while its subscriber was away, a change whose database read failed, and a read made
before this process's own commit (which must not be applied after that commit's reload)."""

import threading

import pytest
import redis

from health.breaker import ConfigSet, Control, ControlKind, ManualClock, factory, use_engine
from health.breaker.base import ConfigUnreadable
from tests.health.conftest import T0, M, P, redis_engine, wait_subscribed
from tests.servers import until, within


def hold() -> Control:
    return Control(ControlKind.FORCED_OPEN, P, M, "incident", until=None, since=T0)


@pytest.mark.parametrize("change", ["set", "released"])
def test_a_hold_changed_while_the_subscriber_was_away_is_followed_when_it_returns(
    change, redis_proxy, redis_url, namespace, engines
):
    channel = f"{namespace}:config"
    held = ConfigSet(controls={(P, M): hold()})
    before, after = (ConfigSet(), held) if change == "set" else (held, ConfigSet())
    database = {"config": before}
    gateway = redis_engine(
        engines,
        redis_proxy.url,
        namespace,
        ManualClock(T0),
        config=before,
        config_channel=channel,
        config_loader=lambda version: database["config"],
        reconnect_interval=0.1,
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_subscribed(client, channel)

    redis_proxy.down()
    until(lambda: dict(client.pubsub_numsub(channel)).get(channel, 0) == 0, 5, "the subscriber to drop")
    database["config"] = after  # committed ...
    client.publish(channel, "2")  # ... and published while this gateway's subscriber is away
    redis_proxy.restore()
    wait_subscribed(client, channel)
    followed = within(lambda: gateway.config.controls == after.controls, 5)
    client.close()

    assert followed is True
    assert gateway.allow(P, M).allowed is (change == "released")


def test_a_change_committed_before_the_first_subscribe_is_followed(redis_url, namespace, engines):
    """The engine is built with what was read at start; a hold committed (and published) before its subscriber
    listened is read when it subscribes."""
    held = ConfigSet(controls={(P, M): hold()})
    gateway = redis_engine(
        engines,
        redis_url,
        namespace,
        ManualClock(T0),
        config=ConfigSet(),
        config_channel=f"{namespace}:config",
        config_loader=lambda version: held,
    )

    assert within(lambda: gateway.config.controls == held.controls, 5) is True
    assert gateway.allow(P, M).allowed is False


def test_a_change_that_could_not_be_read_is_read_again_until_it_is(redis_url, namespace, engines, caplog):
    channel = f"{namespace}:config"
    held = ConfigSet(controls={(P, M): hold()})
    database = {"up": True, "config": ConfigSet(), "reads": 0}

    def loader(version: int) -> ConfigSet:
        database["reads"] += 1
        if not database["up"]:
            raise ConfigUnreadable("the database is down")
        return database["config"]

    gateway = redis_engine(
        engines,
        redis_url,
        namespace,
        ManualClock(T0),
        config_channel=channel,
        config_loader=loader,
        reconnect_interval=0.05,
        resync_interval=3600,
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_subscribed(client, channel)
    until(lambda: database["reads"] >= 1, 5, "the read at subscribe")

    database["up"], database["config"] = False, held  # the hold is committed; this gateway's read of it fails
    reads = database["reads"]
    client.publish(channel, "3")
    until(lambda: database["reads"] >= reads + 2, 5, "a failed read and a retry")
    assert gateway.allow(P, M).allowed is True  # the old configuration, kept
    database["up"] = True  # the database answers again
    followed = within(lambda: gateway.config.controls == held.controls, 5)
    client.close()

    assert followed is True
    assert gateway.allow(P, M).allowed is False
    assert not [r for r in caplog.records if r.name == "health.breaker.redis_backend"]  # the loader said why


def test_get_engine_gives_the_subscriber_the_listeners_lock(monkeypatch, redis_url):
    monkeypatch.setattr(factory, "build_engine", lambda **kwargs: kwargs)
    monkeypatch.setattr(factory, "_engine", None)
    monkeypatch.setattr(factory, "_listen", lambda: None)
    monkeypatch.setattr(factory, "_config_source", ConfigSet)
    monkeypatch.setattr("django.conf.settings.REDIS_URL", redis_url)

    wiring = factory.get_engine()

    assert wiring["config_lock"] is factory._apply_lock
    assert wiring["config_loader"] is factory._load_config_in_subscriber


def test_a_read_made_before_this_process_commits_is_not_applied_after_that_commits_reload(
    monkeypatch, redis_url, namespace, engines
):
    """The subscriber thread reads the database for another process's version 4; meanwhile this process commits
    a hold and its in-process listener reloads (version 5). The subscriber's read and apply share the listener's
    lock, so the listener reads after the stale read is applied, never before it."""
    old, new = ConfigSet(), ConfigSet(controls={(P, M): hold()})
    database = {"config": old, "reads": 0}
    read_made, go_on, listener_read = threading.Event(), threading.Event(), threading.Event()

    def source() -> ConfigSet:
        config = database["config"]
        database["reads"] += 1
        if threading.current_thread().name == "stale-reader":
            read_made.set()
            assert go_on.wait(5)
        elif threading.current_thread().name == "listener":
            listener_read.set()
        return config

    monkeypatch.setattr(factory, "_config_source", source)
    engine = redis_engine(
        engines,
        redis_url,
        namespace,
        ManualClock(T0),
        config_channel=f"{namespace}:config",
        config_loader=factory._load_config_in_subscriber,
        config_lock=factory._apply_lock,
    )
    until(lambda: database["reads"] >= 1, 5, "the engine's read at subscribe")
    with use_engine(engine):
        subscriber = threading.Thread(target=engine._reload_config, args=(4,), name="stale-reader")
        subscriber.start()
        assert read_made.wait(5)
        database["config"] = new  # this process commits a hold ...
        listener = threading.Thread(target=factory._on_config_change, args=(5,), name="listener")
        listener.start()  # ... and its listener reloads
        # Bounded: the listener must not read before the subscriber has applied what it read (it waits).
        read_early = listener_read.wait(0.5)
        go_on.set()
        subscriber.join(5)
        listener.join(5)

    assert read_early is False
    assert engine.config.controls == new.controls


def test_a_change_numbered_below_what_this_process_applied_is_still_read(monkeypatch, redis_url, namespace, engines):
    """Redis's version counter starts again after an empty restart, and a process that saved while Redis was away
    numbered its changes itself: a console that applied its own version 57 still reads another's version 1."""
    database = {"config": ConfigSet()}
    reads: list[ConfigSet] = []

    def source() -> ConfigSet:
        reads.append(database["config"])
        return database["config"]

    monkeypatch.setattr(factory, "_config_source", source)
    engine = redis_engine(
        engines,
        redis_url,
        namespace,
        ManualClock(T0),
        config_channel=f"{namespace}:config",
        config_loader=factory._load_config_in_subscriber,
        config_lock=factory._apply_lock,
    )
    with use_engine(engine):
        factory._on_config_change(57)  # this process's own save, applied by its listener
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_subscribed(client, f"{namespace}:config")
    until(lambda: len(reads) >= 2, 5, "the listener's read and the subscriber's read at subscribe")
    held = ConfigSet(controls={(P, M): hold()})
    database["config"] = held  # another process's save ...
    client.publish(f"{namespace}:config", "1")  # ... numbered 1 by a Redis that came back empty
    followed = within(lambda: engine.config.controls == held.controls, 5)
    client.close()

    assert followed is True


def test_after_a_long_outage_the_engine_is_back_on_redis_within_its_longest_reconnect_wait(
    redis_proxy, redis_url, namespace, engines
):
    """The subscriber's waits double from reconnect_interval and stop growing at max_reconnect_interval: after an
    outage long enough for an uncapped wait to reach 3.2 s, Redis is in use again within about the cap."""
    engine = redis_engine(
        engines, redis_proxy.url, namespace, ManualClock(T0), reconnect_interval=0.1, max_reconnect_interval=0.2
    )
    redis_proxy.down()
    engine.get(P, M)  # any Redis call: degraded from here on
    assert engine.degraded
    # An outage of 3.2 s: without the cap the subscriber's waits are 0.1, 0.2, 0.4, 0.8, 1.6, then 3.2 s from
    # 3.1 s on, its next attempt 3.1 s after Redis is back; with it, at most 0.2 s after.
    assert within(lambda: not engine.degraded, 3.2) is False  # Redis stays away this long
    redis_proxy.restore()

    assert within(lambda: not engine.degraded, 1.5) is True
