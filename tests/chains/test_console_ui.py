"""The Fallback Chains list and the resilience defaults as the console's rules want them: Enabled / Disabled, the
default order said in words, stable ids on every control of the swapped table, times that say UTC."""

import re

import pytest

from chains.models import ResilienceDefaults
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db

LIST_URL = "/fallback/chains/"
HX = {"HX-Request": "true", "HX-Target": "chain-table"}


def test_the_status_pill_reads_enabled_and_the_toggle_keeps_its_id(admin_client):
    chain = ChainFactory(name="on-chain", enabled=True)

    html = admin_client.get(LIST_URL).content.decode()
    toggled = admin_client.post(f"/fallback/chains/{chain.pk}/toggle/", {"enabled": "0"}, headers=HX).content.decode()

    assert '<span class="pill pill-enabled">Enabled</span>' in html and ">Active<" not in html
    # The same id before and after: htmx puts the keyboard back on the button the row was toggled with.
    assert f'id="chain-toggle-{chain.pk}"' in html and f'id="chain-toggle-{chain.pk}"' in toggled


def test_the_default_order_is_said_and_a_column_order_names_its_column(admin_client):
    ChainFactory(name="a")

    default = admin_client.get(LIST_URL).content.decode()
    by_name = admin_client.get(LIST_URL + "?sort=-name").content.decode()

    assert re.search(r'<p class="table-meta" id="chain-order">Sorted by: newest first', default)
    assert "aria-sort" not in default.split("<thead>")[1].split("</thead>")[0]  # no column claims the order
    order = re.search(r'<p class="table-meta" id="chain-order">(.*?)</p>', by_name, re.S).group(1)
    assert order.startswith("Sorted by: name, descending")
    assert '<a href="/fallback/chains/" id="chain-order-default"' in order


def test_every_control_of_the_swapped_table_has_a_unique_id(admin_client):
    for n in range(30):
        ChainFactory(name=f"chain-{n:02}")

    table = admin_client.get(LIST_URL, headers=HX).content.decode()

    ids = []
    for tag, attrs in re.findall(r"<(a|button)\b([^>]*)>", table):
        found = re.search(r'\bid="([^"]+)"', attrs)
        assert found, f"<{tag}{attrs}> has no id"
        ids.append(found.group(1))
    assert len(ids) == len(set(ids))
    assert {"sort-name", "pager-next", "pager-page-2"} <= set(ids)


def test_resilience_defaults_say_when_in_utc(admin_client, admin_user):
    ResilienceDefaults.objects.create(
        pk=ResilienceDefaults.SINGLETON_ID, policy={"max_retries": 2}, updated_by=admin_user
    )

    html = admin_client.get("/fallback/chains/resilience/").content.decode()

    assert re.search(r'last changed <time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC</time> by ', html)
