"""What a change of placement (fleet, n, k, key version or algorithm) costs, tenant by tenant."""

from __future__ import annotations

from typing import Any

from . import _native


def diff(before: Any, after: Any, tenants: Any) -> dict:
    """Compares two placers over ``tenants`` (ids, pairs or a DataFrame).

    Returns ``{"tenants", "changed", "members_moved", "members_removed",
    "moves"}``, where ``moves`` lists every changed tenant in input order as
    ``{"tenant", "added", "removed"}`` (shard ids; a tenant whose members
    only changed order has not moved).
    """
    from . import _ids

    return _native.migration_diff(before, after, _ids(tenants))
