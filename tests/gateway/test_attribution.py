"""The attribution headers (x-vidai-*) as gateway/attempts.py builds them, cached per route and target."""

from gateway import attempts
from gateway.exchange import Exchange
from gateway.snapshot import Route, Target


def call(requested: str, primary: Target, *, fallback: bool, request_id: str = "req-1") -> Exchange:
    exchange = Exchange(request_id=request_id, started=0.0, created_at=0.0, requested_model=requested)
    exchange.route = Route(requested_model=requested, routed_model=primary.model, primary=primary, chain=None)
    exchange.fallback = fallback
    return exchange


def test_each_call_gets_the_headers_of_its_own_route_target_and_request():
    primary = Target("openai", "gpt-4o")
    served = Target("backup", "claude")

    direct = attempts._attribution(call("gpt-4o", primary, fallback=False, request_id="a"), primary)
    alias = attempts._attribution(call("smart", primary, fallback=False, request_id="b"), primary)
    fell = attempts._attribution(call("gpt-4o", primary, fallback=True, request_id="c"), served)
    again = attempts._attribution(call("gpt-4o", primary, fallback=False, request_id="d"), primary)
    # The same model name at another provider, reached by fallback: not the direct call's headers.
    same_name = attempts._attribution(call("gpt-4o", primary, fallback=True, request_id="e"), Target("azure", "gpt-4o"))

    assert direct == [(b"x-vidai-model", b"gpt-4o"), (b"x-vidai-request-id", b"a")]
    assert alias == [
        (b"x-vidai-model", b"gpt-4o"),
        (b"x-vidai-request-id", b"b"),
        (b"x-vidai-requested-model", b"smart"),
    ]
    assert fell == [
        (b"x-vidai-model", b"claude"),
        (b"x-vidai-request-id", b"c"),
        (b"x-vidai-requested-model", b"gpt-4o"),
        (b"x-vidai-fallback", b"true"),
        (b"x-vidai-fallback-from", b"openai"),
    ]
    assert again == [(b"x-vidai-model", b"gpt-4o"), (b"x-vidai-request-id", b"d")]
    assert same_name == [
        (b"x-vidai-model", b"gpt-4o"),
        (b"x-vidai-request-id", b"e"),
        (b"x-vidai-fallback", b"true"),
        (b"x-vidai-fallback-from", b"openai"),
    ]


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(attempts, "_ATTRIBUTION", {})
    primary = Target("openai", "gpt-4o")

    for n in range(attempts._ATTRIBUTION_MAX + 10):
        headers = attempts._attribution(call(f"alias-{n}", primary, fallback=False), primary)
        assert headers[2] == (b"x-vidai-requested-model", f"alias-{n}".encode())

    assert 0 < len(attempts._ATTRIBUTION) <= attempts._ATTRIBUTION_MAX
