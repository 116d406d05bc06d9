"""The test tiers: every test is `fast` or `slow`, and the collection refuses one that is neither.

fast: needs no guest (QEMU), no server (PostgreSQL, sshd, a netns fleet, MariaDB, lighttpd,
memcached, Ansible), no large simulation, and is quick; `./scripts/test --fast` runs these.
slow: everything else. `./scripts/test` runs both.

A test gets its tier from a marker: ``pytestmark = pytest.mark.fast`` (or ``slow``) in its
module, or ``@pytest.mark.fast`` / ``@pytest.mark.slow`` on the test, its class or one of its
parameters when a module mixes the two. The collection (``settle``, called from conftest.py)
refuses, naming the tests:

- a test with no tier marker, or with both;
- a test marked fast that uses a server fixture (SERVER_FIXTURES): a wrong marker must not
  hide a server test in the fast tier.

One case is settled here rather than refused: ``any_url`` runs a test on SQLite and on
PostgreSQL, and a fixture's parameter cannot be marked by the module that uses it, so the
PostgreSQL half of a fast test is slow. Each test's settled tier is put on the test itself
(and taken off its module and class), so ``-m fast`` and ``-m slow`` select exactly the tiers.
"""

from __future__ import annotations

import pytest

TIERS = ("fast", "slow")

# Fixtures (conftest.py) that start a server or wait for a guest; background.RUNS' names are
# added by ``server_fixtures``. postgres_url requests postgres_server, and is named for the
# message: it is the one a test asks for.
SERVER_FIXTURES = ("postgres_server", "postgres_url", "sshd", "netns_fleet")


def server_fixtures() -> set[str]:
    import background

    return {*SERVER_FIXTURES, *background.RUNS}


def _servers_used(item: pytest.Item, servers: set[str]) -> list[str]:
    return sorted(servers.intersection(getattr(item, "fixturenames", ())))


def _on_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("any_url") == "postgresql"


def tier_of(item: pytest.Item, servers: set[str]) -> tuple[str | None, str]:
    """The item's tier, or None and why it has none."""
    marked = {m.name for m in item.iter_markers() if m.name in TIERS}
    if not marked:
        return None, "no tier marker (pytest.mark.fast or pytest.mark.slow)"
    if len(marked) == 2:
        return None, "both tier markers, fast and slow"
    (tier,) = marked
    used = _servers_used(item, servers)
    if tier == "fast" and used:
        return None, f"marked fast but uses {', '.join(used)} (a server or guest): mark it slow"
    if tier == "fast" and _on_postgresql(item):
        return "slow", "any_url's PostgreSQL half"
    return tier, ""


def settle(items: list[pytest.Item]) -> None:
    """Give every item exactly one tier marker, its own, or refuse the collection."""
    servers = server_fixtures()
    tiers: dict[int, str] = {}
    refused: list[str] = []
    for item in items:
        tier, why = tier_of(item, servers)
        if tier is None:
            refused.append(f"  {item.nodeid}: {why}")
        else:
            tiers[id(item)] = tier
    if refused:
        raise pytest.UsageError(
            f"{len(refused)} test(s) without a valid tier (tests/tiers.py says how to give one):\n"
            + "\n".join(refused)
        )
    for item in items:
        # The module's or class's marker would still select a settled PostgreSQL half with
        # -m fast: the settled tier goes on the item, the only place -m then finds one.
        for node in item.listchain():
            node.own_markers[:] = [m for m in node.own_markers if m.name not in TIERS]
        item.add_marker(tiers[id(item)])
