import pytest

from audit.models import AuditEvent
from chains.models import ChainEntry, FallbackChain
from tests.factories import ChainFactory, LlmModelFactory, TeamFactory
from tests.helpers.api import patch_json, post_json, put_json

LIST_URL = "/api/chains/"


def detail_url(chain) -> str:
    return f"/api/chains/{chain.pk}/"


def chain_body(**overrides) -> dict:
    body = {
        "name": "Primary fallback",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}],
        "scope": {"type": "global", "id": None},
        "enabled": True,
    }
    body.update(overrides)
    return body


def create_chain(client, **overrides) -> dict:
    response = post_json(client, LIST_URL, chain_body(**overrides))
    assert response.status_code == 201, response.json()
    return response.json()


def assert_nothing_saved() -> None:
    assert FallbackChain.objects.count() == 0
    assert ChainEntry.objects.count() == 0
    assert AuditEvent.objects.count() == 0


# --- create ----------------------------------------------------------------------------------


def test_chain_create_returns_the_chain_and_audits_it(admin_client, catalog):
    response = post_json(admin_client, LIST_URL, chain_body())

    assert response.status_code == 201
    body = response.json()
    chain = FallbackChain.objects.get()
    assert {k: v for k, v in body.items() if k not in ("created_at", "updated_at")} == {
        "id": chain.pk,
        "name": "Primary fallback",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}],
        "scope": {"type": "global", "id": None},
        "enabled": True,
        "resilience": {"enabled": False},
        "version": 1,
    }
    assert body["created_at"] == chain.created_at.isoformat().replace("+00:00", "Z")
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_id) == ("chain.create", "alice", str(chain.pk))


def test_chain_create_defaults_to_global_and_enabled(admin_client, catalog):
    body = chain_body()
    del body["scope"], body["enabled"]

    response = post_json(admin_client, LIST_URL, body)

    assert response.status_code == 201
    assert (response.json()["scope"], response.json()["enabled"]) == ({"type": "global", "id": None}, True)


def test_chain_create_with_team_scope_and_provider_override(admin_client, catalog):
    team = TeamFactory()

    response = post_json(
        admin_client,
        LIST_URL,
        chain_body(
            entries=[{"model": "gpt-4o", "provider": "anthropic"}, {"model": "gemini-pro"}],
            scope={"type": "team", "id": team.pk},
            enabled=False,
        ),
    )

    assert response.status_code == 201
    body = response.json()
    assert body["entries"] == [{"model": "gpt-4o", "provider": "anthropic"}, {"model": "gemini-pro", "provider": None}]
    assert (body["scope"], body["enabled"]) == ({"type": "team", "id": team.pk}, False)


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"name": ""}, {"name": ["Name is required and cannot be only whitespace."]}),
        ({"name": "   "}, {"name": ["Name is required and cannot be only whitespace."]}),
        ({"name": "x" * 201}, {"name": ["Name is at most 200 characters."]}),
        ({"source_model": " \t "}, {"source_model": ["Source model is required and cannot be only whitespace."]}),
        ({"source_model": "nope"}, {"source_model": ["Unknown model “nope”."]}),
        ({"entries": []}, {"entries": ["A chain needs at least one entry."]}),
        (
            {"entries": [{"model": "  "}]},
            {"entries.0.model": ["Entry 1: model is required and cannot be only whitespace."]},
        ),
        ({"entries": [{"model": "nope"}]}, {"entries.0.model": ["Entry 1: unknown model “nope”."]}),
        (
            {"entries": [{"model": "claude-sonnet"}, {"model": "claude-sonnet"}]},
            {"entries.1.model": ["Entry 2 repeats entry 1 (claude-sonnet via anthropic)."]},
        ),
        (
            {"entries": [{"model": "gpt-4o"}]},
            {"entries.0.model": ["Entry 1: gpt-4o is the source model; a chain cannot fall back to itself."]},
        ),
        (
            {"entries": [{"model": "claude-sonnet", "provider": "nope"}]},
            {"entries.0.provider": ["Entry 1: unknown provider “nope”."]},
        ),
        ({"scope": {"type": "team", "id": 999999}}, {"scope": ["No team with id 999999 exists."]}),
        ({"scope": {"type": "team"}}, {"scope": ["Choose the team this applies to."]}),
        ({"scope": {"type": "global", "id": 3}}, {"scope": ["A global scope takes no target id."]}),
        (
            {"scope": {"type": "galaxy", "id": None}},
            {"scope": ["Scope type must be one of: global, team, application, user, agent, key."]},
        ),
    ],
)
def test_chain_create_refuses_invalid_input_and_saves_nothing(admin_client, catalog, overrides, errors):
    response = post_json(admin_client, LIST_URL, chain_body(**overrides))

    assert response.status_code == 400
    assert response.json() == {"detail": next(iter(errors.values()))[0], "errors": errors}
    assert_nothing_saved()


def test_chain_create_refuses_more_than_ten_entries(admin_client, catalog):
    names = [LlmModelFactory().name for _ in range(11)]

    response = post_json(admin_client, LIST_URL, chain_body(entries=[{"model": n} for n in names]))

    assert response.status_code == 400
    assert response.json()["errors"] == {"entries": ["A chain has at most 10 entries (got 11)."]}
    assert_nothing_saved()


def test_chain_create_accepts_exactly_ten_entries(admin_client, catalog):
    names = [LlmModelFactory().name for _ in range(10)]

    response = post_json(admin_client, LIST_URL, chain_body(entries=[{"model": n} for n in names]))

    assert response.status_code == 201
    assert [e["model"] for e in response.json()["entries"]] == names


def test_chain_create_collects_every_field_error(admin_client, catalog):
    response = post_json(admin_client, LIST_URL, chain_body(name=" ", source_model="nope", entries=[]))

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": ["Name is required and cannot be only whitespace."],
        "source_model": ["Unknown model “nope”."],
        "entries": ["A chain needs at least one entry."],
    }


def test_chain_create_refuses_second_chain_for_same_source_and_scope(admin_client, catalog):
    create_chain(admin_client, name="First")

    response = post_json(admin_client, LIST_URL, chain_body(name="Second", entries=[{"model": "gemini-pro"}]))

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "source_model": ["Chain “First” already covers gpt-4o in this scope; edit it instead."]
    }
    assert list(FallbackChain.objects.values_list("name", flat=True)) == ["First"]
    assert AuditEvent.objects.count() == 1


def test_chain_create_allows_same_source_in_another_scope(admin_client, catalog):
    team = TeamFactory()
    create_chain(admin_client, name="Global")

    response = post_json(admin_client, LIST_URL, chain_body(name="Team", scope={"type": "team", "id": team.pk}))

    assert response.status_code == 201
    assert sorted(FallbackChain.objects.values_list("name", flat=True)) == ["Global", "Team"]


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"entries": "claude-sonnet"}, {"entries": ['Expected a list of items but got type "str".']}),
        ({"entries": {"model": "claude-sonnet"}}, {"entries": ['Expected a list of items but got type "dict".']}),
        ({"entries": None}, {"entries": ["This field may not be null."]}),
        ({"entries": ["claude-sonnet"]}, {"entries.0": ["Invalid data. Expected a dictionary, but got str."]}),
        ({"entries": [{"model": ["a"]}]}, {"entries.0.model": ["Not a valid string."]}),
        ({"enabled": "yes"}, {"enabled": ["Must be true or false."]}),
        ({"enabled": 1}, {"enabled": ["Must be true or false."]}),
        ({"name": {"x": 1}}, {"name": ["Not a valid string."]}),
        ({"scope": "global"}, {"scope": ["Invalid data. Expected a dictionary, but got str."]}),
        ({"scope": {"type": "team", "id": "abc"}}, {"scope.id": ["A valid integer is required."]}),
    ],
)
def test_chain_create_refuses_wrong_types_with_400(admin_client, catalog, overrides, errors):
    response = post_json(admin_client, LIST_URL, chain_body(**overrides))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert_nothing_saved()


@pytest.mark.parametrize("missing", ["name", "source_model", "entries"])
def test_chain_create_requires_fields(admin_client, catalog, missing):
    body = chain_body()
    del body[missing]

    response = post_json(admin_client, LIST_URL, body)

    assert response.status_code == 400
    assert response.json() == {
        "detail": f"{missing}: This field is required.",
        "errors": {missing: ["This field is required."]},
    }


def test_chain_create_refuses_a_body_that_is_not_an_object(admin_client, catalog):
    response = post_json(admin_client, LIST_URL, [chain_body()])

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Invalid data. Expected a dictionary, but got list.",
        "errors": {"__all__": ["Invalid data. Expected a dictionary, but got list."]},
    }


def test_chain_create_refuses_malformed_json(admin_client, catalog):
    response = admin_client.post(LIST_URL, "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    assert_nothing_saved()


def test_chain_create_with_an_oversized_body_is_413_json(admin_client, catalog):
    # Over DATA_UPLOAD_MAX_MEMORY_SIZE (Django's default, 2.5 MiB).
    body = {"name": "x" * 3_000_000, "source_model": "gpt-4o", "entries": [{"model": "claude-sonnet"}]}

    response = post_json(admin_client, LIST_URL, body)

    assert (response.status_code, response["Content-Type"]) == (413, "application/json")
    assert response.json() == {"detail": "Request body is too large: the limit is 2621440 bytes."}
    assert_nothing_saved()


# --- read ------------------------------------------------------------------------------------


def test_chain_detail_returns_the_chain(admin_client, catalog):
    chain = ChainFactory(name="Sonnet backup", source_model=catalog["gpt-4o"], entries=[catalog["claude-sonnet"]])

    response = admin_client.get(detail_url(chain))

    assert response.status_code == 200
    assert {k: v for k, v in response.json().items() if k not in ("created_at", "updated_at")} == {
        "id": chain.pk,
        "name": "Sonnet backup",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet", "provider": None}],
        "scope": {"type": "global", "id": None},
        "enabled": True,
        "resilience": {},
        "version": 1,
    }


def test_chain_detail_of_missing_chain_is_404(admin_client, catalog):
    response = admin_client.get("/api/chains/999999/")

    assert response.status_code == 404


def names_of(response) -> list[str]:
    return [c["name"] for c in response.json()["results"]]


def test_chain_list_is_newest_first_by_default(admin_client, catalog):
    for name in ("older", "middle", "newest"):
        ChainFactory(name=name)

    response = admin_client.get(LIST_URL)

    assert response.status_code == 200
    assert names_of(response) == ["newest", "middle", "older"]
    assert (response.json()["count"], response.json()["next"], response.json()["previous"]) == (3, None, None)


def test_chain_list_search_matches_every_word_in_name_or_source_model(admin_client, catalog):
    ChainFactory(name="Payments backup", source_model=catalog["gpt-4o"])
    ChainFactory(name="Payments spare", source_model=catalog["claude-sonnet"])
    ChainFactory(name="Search backup", source_model=LlmModelFactory(name="gpt-4o-large"))

    by_name_and_model = admin_client.get(LIST_URL, {"search": "payments GPT-4O"})
    by_two_name_words = admin_client.get(LIST_URL, {"search": "backup search"})
    by_model_only = admin_client.get(LIST_URL, {"search": "sonnet"})
    no_match = admin_client.get(LIST_URL, {"search": "payments gemini"})

    assert names_of(by_name_and_model) == ["Payments backup"]
    assert names_of(by_two_name_words) == ["Search backup"]
    assert names_of(by_model_only) == ["Payments spare"]
    assert names_of(no_match) == []


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        ("name", ["alpha", "bravo", "charlie"]),
        ("-name", ["charlie", "bravo", "alpha"]),
        ("source_model", ["bravo", "charlie", "alpha"]),
        ("-source_model", ["alpha", "charlie", "bravo"]),
        ("status", ["charlie", "bravo", "alpha"]),
        ("created", ["bravo", "alpha", "charlie"]),
        ("-created", ["charlie", "alpha", "bravo"]),
    ],
)
def test_chain_list_sorts_by_column(admin_client, catalog, ordering, expected):
    ChainFactory(name="bravo", source_model=catalog["claude-sonnet"])
    ChainFactory(name="alpha", source_model=catalog["gpt-4o-mini"])
    ChainFactory(name="charlie", source_model=catalog["gemini-pro"], enabled=False)

    response = admin_client.get(LIST_URL, {"ordering": ordering})

    assert response.status_code == 200
    assert names_of(response) == expected


def test_chain_list_refuses_unknown_ordering(admin_client, catalog):
    response = admin_client.get(LIST_URL, {"ordering": "price"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"ordering": ['"price" is not a valid choice.']}


def test_chain_list_pages(admin_client, catalog):
    for i in range(12):
        ChainFactory(name=f"chain-{i:02d}")

    first = admin_client.get(LIST_URL, {"ordering": "name", "page_size": 10})
    second = admin_client.get(LIST_URL, {"ordering": "name", "page_size": 10, "page": 2})

    assert names_of(first) == [f"chain-{i:02d}" for i in range(10)]
    assert first.json()["count"] == 12
    assert first.json()["next"] == "http://testserver/api/chains/?ordering=name&page=2&page_size=10"
    assert names_of(second) == ["chain-10", "chain-11"]
    assert second.json()["next"] is None


def test_chain_list_default_page_size_is_25(admin_client, catalog):
    for _ in range(26):
        ChainFactory()

    response = admin_client.get(LIST_URL)

    assert (len(response.json()["results"]), response.json()["count"]) == (25, 26)


def test_chain_list_page_size_is_capped_at_100(admin_client, catalog):
    source = LlmModelFactory()
    entry = LlmModelFactory()
    FallbackChain.objects.bulk_create(
        FallbackChain(name=f"c{i}", source_model=source, scope_type="team", scope_id=i) for i in range(101)
    )
    ChainEntry.objects.bulk_create(ChainEntry(chain=c, position=0, model=entry) for c in FallbackChain.objects.all())

    response = admin_client.get(LIST_URL, {"page_size": 500})

    assert (len(response.json()["results"]), response.json()["count"]) == (100, 101)


def test_chain_list_page_out_of_range_is_404(admin_client, catalog):
    ChainFactory()

    response = admin_client.get(LIST_URL, {"page": 5})

    assert response.status_code == 404


def test_chain_list_query_count_does_not_grow_with_rows(admin_client, catalog, django_assert_num_queries):
    ChainFactory(entries=[catalog["claude-sonnet"]])
    with django_assert_num_queries(6) as one_row:
        admin_client.get(LIST_URL)
    ChainFactory(entries=[catalog["claude-sonnet"], catalog["gemini-pro"]])
    ChainFactory(entries=[catalog["gpt-4o-mini"]])

    with django_assert_num_queries(6) as three_rows:
        response = admin_client.get(LIST_URL)

    assert len(response.json()["results"]) == 3
    assert len(one_row.captured_queries) == len(three_rows.captured_queries)


# --- update ----------------------------------------------------------------------------------


def test_chain_put_replaces_the_chain_and_bumps_the_version(admin_client, catalog):
    created = create_chain(admin_client)

    response = put_json(
        admin_client,
        f"/api/chains/{created['id']}/",
        chain_body(name="Renamed", entries=[{"model": "gemini-pro"}], enabled=False, version=1),
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["entries"], body["enabled"], body["version"]) == (
        "Renamed",
        [{"model": "gemini-pro", "provider": None}],
        False,
        2,
    )
    event = AuditEvent.objects.get(action="chain.update")
    assert event.before == {
        "name": "Primary fallback",
        "entries": [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}],
        "enabled": True,
    }
    assert event.after == {"name": "Renamed", "entries": [{"model": "gemini-pro", "provider": None}], "enabled": False}


def test_chain_put_with_stale_version_is_409_and_changes_nothing(admin_client, catalog):
    created = create_chain(admin_client)
    url = f"/api/chains/{created['id']}/"
    put_json(admin_client, url, chain_body(name="Someone else", version=1))

    response = put_json(admin_client, url, chain_body(name="Mine", version=1))

    assert response.status_code == 409
    assert response.json() == {
        "detail": "This chain was changed by someone else (you edited version 1, it is now at version 2). "
        "Reload to see their changes, then apply yours again.",
        "errors": {"version": ["Stale version 1; current is 2."]},
    }
    chain = FallbackChain.objects.get()
    assert (chain.name, chain.version) == ("Someone else", 2)


@pytest.mark.parametrize("missing", ["version", "scope", "enabled", "entries"])
def test_chain_put_requires_every_field(admin_client, catalog, missing):
    created = create_chain(admin_client)
    body = chain_body(version=1)
    del body[missing]

    response = put_json(admin_client, f"/api/chains/{created['id']}/", body)

    assert response.status_code == 400
    assert response.json()["errors"] == {missing: ["This field is required."]}
    assert FallbackChain.objects.get().version == 1


def test_chain_put_with_invalid_input_changes_nothing(admin_client, catalog):
    created = create_chain(admin_client)

    response = put_json(
        admin_client,
        f"/api/chains/{created['id']}/",
        chain_body(name="  ", entries=[{"model": "gemini-pro"}, {"model": "gemini-pro"}], version=1),
    )

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": ["Name is required and cannot be only whitespace."],
        "entries.1.model": [f"Entry 2 repeats entry 1 (gemini-pro via {catalog['gemini-pro'].provider.name})."],
    }
    chain = FallbackChain.objects.get()
    assert (chain.name, chain.version) == ("Primary fallback", 1)
    assert [e.model.name for e in chain.entries.all()] == ["claude-sonnet", "gemini-pro"]
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.create"]


def test_chain_put_on_missing_chain_is_404(admin_client, catalog):
    response = put_json(admin_client, "/api/chains/999999/", chain_body(version=1))

    assert response.status_code == 404


def test_chain_patch_merges_with_the_current_chain(admin_client, catalog):
    created = create_chain(admin_client)

    response = patch_json(admin_client, f"/api/chains/{created['id']}/", {"enabled": False, "version": 1})

    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["entries"], body["enabled"], body["version"]) == (
        "Primary fallback",
        [{"model": "claude-sonnet", "provider": None}, {"model": "gemini-pro", "provider": None}],
        False,
        2,
    )
    event = AuditEvent.objects.get(action="chain.update")
    assert (event.before, event.after) == ({"enabled": True}, {"enabled": False})


def test_chain_patch_replaces_entries_as_a_whole(admin_client, catalog):
    created = create_chain(admin_client)

    response = patch_json(
        admin_client,
        f"/api/chains/{created['id']}/",
        {"entries": [{"model": "gemini-pro"}, {"model": "claude-sonnet"}], "version": 1},
    )

    assert response.status_code == 200
    assert [e["model"] for e in response.json()["entries"]] == ["gemini-pro", "claude-sonnet"]


def test_chain_patch_can_move_the_chain_to_another_scope(admin_client, catalog):
    team = TeamFactory()
    created = create_chain(admin_client)

    response = patch_json(
        admin_client, f"/api/chains/{created['id']}/", {"scope": {"type": "team", "id": team.pk}, "version": 1}
    )

    assert response.status_code == 200
    assert response.json()["scope"] == {"type": "team", "id": team.pk}


@pytest.mark.parametrize("body", [{"version": 1}, {"colour": "blue", "version": 1}, {"enabled": True, "version": 1}])
def test_chain_patch_that_changes_nothing_keeps_the_version(admin_client, catalog, body):
    created = create_chain(admin_client)
    url = f"/api/chains/{created['id']}/"

    response = patch_json(admin_client, url, body)
    other_editor = patch_json(admin_client, url, {"name": "Other edit", "version": 1})

    assert (response.status_code, response.json()["version"]) == (200, 1)
    assert (other_editor.status_code, other_editor.json()["version"]) == (200, 2)
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == ["chain.create", "chain.update"]


def test_chain_patch_requires_version(admin_client, catalog):
    created = create_chain(admin_client)

    response = patch_json(admin_client, f"/api/chains/{created['id']}/", {"enabled": False})

    assert response.status_code == 400
    assert response.json() == {
        "detail": "version is required: send the version you edited.",
        "errors": {"version": ["This field is required."]},
    }
    assert FallbackChain.objects.get().enabled is True


def test_chain_patch_with_stale_version_is_409(admin_client, catalog):
    created = create_chain(admin_client)
    url = f"/api/chains/{created['id']}/"
    patch_json(admin_client, url, {"name": "First edit", "version": 1})

    response = patch_json(admin_client, url, {"name": "Second edit", "version": 1})

    assert response.status_code == 409
    assert response.json()["errors"] == {"version": ["Stale version 1; current is 2."]}
    assert FallbackChain.objects.get().name == "First edit"


def test_chain_patch_cannot_take_another_chains_source_and_scope(admin_client, catalog):
    create_chain(admin_client, name="Taken")
    other = create_chain(admin_client, name="Other", source_model="gpt-4o-mini")

    response = patch_json(admin_client, f"/api/chains/{other['id']}/", {"source_model": "gpt-4o", "version": 1})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "source_model": ["Chain “Taken” already covers gpt-4o in this scope; edit it instead."]
    }
    assert FallbackChain.objects.get(pk=other["id"]).source_model.name == "gpt-4o-mini"


def test_chain_patch_refuses_wrong_types(admin_client, catalog):
    created = create_chain(admin_client)

    response = patch_json(admin_client, f"/api/chains/{created['id']}/", {"enabled": "off", "version": "two"})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "enabled": ["Must be true or false."],
        "version": ["A valid integer is required."],
    }


@pytest.mark.parametrize(
    ("body", "detail", "errors"),
    [
        (
            {"entries": [{}]},
            "entries.0.model: This field is required.",
            {"entries.0.model": ["This field is required."]},
        ),
        (
            {"entries": [{"model": "gemini-pro"}, {"provider": "openai"}]},
            "entries.1.model: This field is required.",
            {"entries.1.model": ["This field is required."]},
        ),
        ({"scope": {"id": 3}}, "scope.type: This field is required.", {"scope.type": ["This field is required."]}),
        ({"scope": {}}, "scope.type: This field is required.", {"scope.type": ["This field is required."]}),
    ],
)
def test_chain_patch_refuses_incomplete_nested_objects(admin_client, catalog, body, detail, errors):
    created = create_chain(admin_client)

    response = patch_json(admin_client, f"/api/chains/{created['id']}/", {**body, "version": 1})

    assert response.status_code == 400
    assert response.json() == {"detail": detail, "errors": errors}
    chain = FallbackChain.objects.get()
    assert (chain.version, [e.model.name for e in chain.entries.all()]) == (1, ["claude-sonnet", "gemini-pro"])
    assert AuditEvent.objects.count() == 1


def test_chain_patch_with_a_complete_entry_fills_its_defaults(admin_client, catalog):
    created = create_chain(admin_client)

    response = patch_json(
        admin_client, f"/api/chains/{created['id']}/", {"entries": [{"model": "gemini-pro"}], "version": 1}
    )

    assert response.status_code == 200
    assert response.json()["entries"] == [{"model": "gemini-pro", "provider": None}]


# --- delete ----------------------------------------------------------------------------------


def test_chain_delete_removes_the_chain_and_audits_a_snapshot(admin_client, catalog):
    created = create_chain(admin_client)

    response = admin_client.delete(f"/api/chains/{created['id']}/")

    assert response.status_code == 204
    assert FallbackChain.objects.count() == 0
    assert ChainEntry.objects.count() == 0
    event = AuditEvent.objects.get(action="chain.delete")
    assert event.before == {**chain_body(), "resilience": {"enabled": False}, "version": 1}


def test_chain_delete_with_current_version_deletes(admin_client, catalog):
    created = create_chain(admin_client)

    response = admin_client.delete(f"/api/chains/{created['id']}/?version=1")

    assert response.status_code == 204
    assert FallbackChain.objects.count() == 0


def test_chain_delete_with_stale_version_is_409_and_keeps_the_chain(admin_client, catalog):
    created = create_chain(admin_client)
    patch_json(admin_client, f"/api/chains/{created['id']}/", {"enabled": False, "version": 1})

    response = admin_client.delete(f"/api/chains/{created['id']}/?version=1")

    assert response.status_code == 409
    assert response.json()["errors"] == {"version": ["Stale version 1; current is 2."]}
    assert FallbackChain.objects.count() == 1


def test_chain_delete_refuses_a_version_that_is_not_a_number(admin_client, catalog):
    created = create_chain(admin_client)

    response = admin_client.delete(f"/api/chains/{created['id']}/?version=latest")

    assert response.status_code == 400
    assert response.json()["errors"] == {"version": ["A valid integer is required."]}
    assert FallbackChain.objects.count() == 1


def test_chain_delete_of_missing_chain_is_404(admin_client, catalog):
    response = admin_client.delete("/api/chains/999999/")

    assert response.status_code == 404
