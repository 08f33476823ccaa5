"""A second gateway-like process for the kill-switch tests: `python -m tests.health.control_worker <namespace> <t0>`.

It runs Django against the test's database (the environment from tests.servers.production_env) and a Redis
engine that follows published configuration changes as every gateway process does (`cp:config`), on a
hand-driven clock starting at <t0>. Commands, one per line on stdin, each answered by one line on stdout:
`allow <provider> <model>` -> 1 or 0; `advance <seconds>` -> the new time; `quit`.
"""

import sys
import time


def main() -> None:
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.db import connections

    from core.configbus import CHANNEL
    from health.breaker import ConfigSet, ManualClock
    from health.breaker.redis_backend import RedisEngine
    from health.selectors import breaker_config_snapshot

    namespace, start = sys.argv[1], float(sys.argv[2])
    clock = ManualClock(start)

    def load(version: int) -> ConfigSet:
        try:
            return breaker_config_snapshot()
        finally:
            connections.close_all()  # the subscriber thread's connection

    engine = RedisEngine(
        url=settings.REDIS_URL,
        namespace=namespace,
        clock=clock,
        config=load(0),
        config_channel=CHANNEL,
        config_loader=load,
    )
    # Readiness: the subscriber has subscribed (its namespace's channel and cp:config, in one command), so no
    # published change can be missed from here on.
    client = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + 10
    while dict(client.pubsub_numsub(f"{namespace}:events")).get(f"{namespace}:events".encode(), 0) < 1:
        if time.monotonic() > deadline:
            raise SystemExit("the engine did not subscribe")
        time.sleep(0.01)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "allow":
                print("1" if engine.allow(args[0], args[1]).allowed else "0", flush=True)
            elif command == "advance":
                print(clock.advance(float(args[0])), flush=True)
            elif command == "quit":
                break
    finally:
        engine.close()


if __name__ == "__main__":
    main()
