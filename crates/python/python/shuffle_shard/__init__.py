"""Shuffle-sharding placement and blast-radius analysis.

The same Rust code as the shuffle-shard gateway and command line, so every
Python component that routes or stores a tenant's work computes the
gateway's subset:

- :func:`shuffle_shards`: the design chapter's Recipe 12.1, bit for bit;
- :class:`Placer`: rendezvous or Recipe 12.1 over a fleet of shard ids,
  with zones, weights and per-tenant overrides; batch placement releases
  the GIL and can fill a NumPy array;
- :class:`KeyRing`: versioned placement keys; :func:`migration.diff`
  prices a change of placement tenant by tenant;
- :func:`blast`, :func:`plan`, :func:`migrate`: the analyser, returning
  the dicts ``shuffle-shard blast|plan|migrate --json`` print.

``tenants`` arguments take a count of synthetic tenants (analysers only),
tenant ids, ``(id, weight)`` pairs, or a pandas DataFrame with ``tenant``
and (optionally) ``weight`` columns. Bad input raises ``TypeError`` or
``ValueError`` with a one-line message; keys never appear in a ``repr``.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple, Union

from . import _native, migration
from ._native import RECIPE_KEY, KeyRing, __version__, shuffle_shards

__all__ = [
    "RECIPE_KEY",
    "KeyRing",
    "Placer",
    "__version__",
    "blast",
    "migrate",
    "migration",
    "plan",
    "shuffle_shards",
]

Tenants = Union[int, Iterable[str], Iterable[Tuple[str, float]], Any]


def _is_dataframe(obj: object) -> bool:
    # Checked by name so that pandas is imported only by whoever passes one.
    return type(obj).__module__.split(".")[0] == "pandas" and hasattr(obj, "columns")


def _population(tenants: Tenants, allow_count: bool = True) -> Tuple[Any, Optional[List[Any]]]:
    """Tenant ids and optional weights from any accepted form of ``tenants``."""
    if isinstance(tenants, bool):
        raise TypeError("tenants must be a count, ids, (id, weight) pairs or a DataFrame, not bool")
    if isinstance(tenants, int):
        if not allow_count:
            raise TypeError("tenants must be tenant ids here, not a count")
        return tenants, None
    if isinstance(tenants, (str, bytes)):
        raise TypeError(
            f"tenants must be a list of tenant ids, not {type(tenants).__name__}; wrap one id in a list"
        )
    if _is_dataframe(tenants):
        columns = list(tenants.columns)
        if "tenant" not in columns:
            raise ValueError(
                f"the tenants DataFrame has no 'tenant' column (it has {columns}); "
                "name the id column 'tenant' and the optional weight column 'weight'"
            )
        ids = tenants["tenant"].tolist()
        weights = tenants["weight"].tolist() if "weight" in columns else None
        return ids, weights
    try:
        items = list(tenants)
    except TypeError:
        raise TypeError(
            f"tenants must be a count, ids, (id, weight) pairs or a DataFrame, not {type(tenants).__name__}"
        ) from None
    pairs = [isinstance(item, tuple) for item in items]
    if not any(pairs):
        return items, None
    if not all(pairs):
        raise TypeError("tenants mixes ids and (id, weight) pairs: give every tenant a weight or none")
    for position, item in enumerate(items):
        if len(item) != 2:
            raise TypeError(f"tenants[{position}] must be an (id, weight) pair, not a {len(item)}-tuple")
    return [item[0] for item in items], [item[1] for item in items]


def _ids(tenants: Tenants) -> Any:
    ids, weights = _population(tenants, allow_count=False)
    return ids


class Placer(_native.Placer):
    """A validated placement: tenant -> subset of shards, as the gateway computes it.

    ``Placer(shards, k, key, algorithm="rendezvous", zones=None, overrides=None, *, key_version=None)``

    - ``shards``: a shard count (ids ``"0"`` to ``"n-1"``), a list of shard
      ids, or ``(id, weight)`` pairs (weights need rendezvous); ``None`` with
      a ``zones`` spec;
    - ``k``: the default subset size;
    - ``key``: the placement key as bytes (not empty, not all zero), or a
      :class:`KeyRing` (its active version, or ``key_version``);
    - ``algorithm``: ``"rendezvous"`` (moves the fewest tenants when the
      fleet changes) or ``"hmac-modulo"`` (Recipe 12.1);
    - ``zones``: a spec such as ``"a:8,b:8"`` or a dict from shard id to
      zone; subsets are then spread over zones;
    - ``overrides``: ``{tenant: k}`` or ``{tenant: [shard ids]}``.
    """

    def place(self, tenants: Tenants) -> List[List[int]]:
        """Every tenant's subset (shard indices, selection order), in parallel without the GIL."""
        return super().place(_ids(tenants))

    def place_array(self, tenants: Tenants, out: Any = None) -> Any:
        """Every tenant's subset as a NumPy ``uint32`` array of shape ``(len(tenants), k)``.

        Needs NumPy (imported only here) and the same ``k`` for every
        tenant. With ``out``, an array of that shape, it is filled and
        returned instead of a new one.
        """
        import numpy

        ids = _ids(tenants)
        if not isinstance(ids, list):
            ids = list(ids)
        flat = self._place_flat(ids)
        array = numpy.frombuffer(flat, dtype=numpy.uint32).reshape(len(ids), self.k)
        if out is None:
            return array
        if getattr(out, "shape", None) != array.shape:
            raise ValueError(
                f"out has shape {getattr(out, 'shape', None)}, but {len(ids)} tenants need ({len(ids)}, {self.k})"
            )
        out[...] = array
        return out


PLACEMENT_OPTIONS = ("shards", "zones", "algorithm", "key", "key_version", "tenant_k")


def _split(options: dict) -> Tuple[dict, dict]:
    """The placement options (as one dict, for the native module) and the rest."""
    placement = {name: options.pop(name) for name in PLACEMENT_OPTIONS if options.get(name) is not None}
    for name in PLACEMENT_OPTIONS:
        options.pop(name, None)
    return placement, options


def blast(*, tenants: Tenants, k: int, **options: Any) -> dict:
    """The blast radius of failures for a placed population: the dict ``shuffle-shard blast --json`` prints.

    Placement options as on the command line: ``shards`` (a count or ids),
    ``zones`` (``"a:8,b:8"``), ``k``, ``algorithm`` (default
    ``"hmac-modulo"``), ``key`` (bytes or a KeyRing; default the public
    recipe key), ``key_version``, ``tenant_k`` (``{tenant: k}``).

    Questions: ``fail`` (failure sets: ``"3,17"`` or ``[3, 17]``),
    ``sweep`` (every failure set of that many shards; ``max_sets``,
    ``seed``), ``zone_outage``, ``capacity`` (with weights), ``waves``
    (``{shard id: wave}`` or a waves file's text), ``poison`` (tenant ids),
    ``poison_sweep``, ``poison_top``, ``poison_after``.
    """
    ids, weights = _population(tenants)
    placement, questions = _split(options)
    return _native.blast(tenants=ids, weights=weights, k=k, placement=placement, **questions)


def plan(
    *,
    tenants: Tenants,
    max_degraded: float,
    max_fully_down: float,
    concurrent_failures: int,
    **options: Any,
) -> dict:
    """Measures k = 1 to 8 against a budget and recommends the smallest that meets it.

    Returns the dict ``shuffle-shard plan --json`` prints. Placement options
    as for :func:`blast`, without ``k``.
    """
    ids, weights = _population(tenants)
    placement, rest = _split(options)
    return _native.plan(
        tenants=ids,
        weights=weights,
        max_degraded=max_degraded,
        max_fully_down=max_fully_down,
        concurrent_failures=concurrent_failures,
        placement=placement,
        **rest,
    )


def migrate(before: dict, after: dict, *, tenants: Tenants, keys: Any = None) -> dict:
    """What changing the placement costs, next to the same change under the other algorithm.

    ``before`` and ``after`` are the command line's SPECs as dicts:
    ``{"shards": 20, "k": 3, "algorithm": "rendezvous", "key": "v1", "zones": "a:8,b:8"}``
    (``algorithm`` defaults to ``"hmac-modulo"``, ``key`` to ``"recipe"``, the
    public recipe key). ``keys`` gives every other version's key: a KeyRing
    or ``{version: key bytes}``. Returns the dict ``shuffle-shard migrate --json``
    prints.
    """
    ids, weights = _population(tenants)
    return _native.migrate(before, after, tenants=ids, weights=weights, keys=keys)
