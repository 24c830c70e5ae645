"""Type stubs for the native half of shuffle_shard (built from crates/python/src)."""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str
RECIPE_KEY: bytes
"""The design chapter's public default key, ``b"shuffle-shard-v1"``: for analysis, never for serving."""

Shards = Union[int, Sequence[str], Sequence[Tuple[str, float]], None]
Zones = Union[str, Mapping[str, str], None]
Key = Union[bytes, bytearray, "KeyRing"]

def shuffle_shards(
    tenant_id: str, n: int = 64, k: int = 3, *, key: Union[bytes, bytearray] = b"shuffle-shard-v1"
) -> List[int]:
    """Recipe 12.1: ``k`` distinct shard indices in ``[0, n)``, in selection order, bit for bit the chapter's."""

class KeyRing:
    """Named placement key versions, one of them active; keys never appear in ``repr``."""

    def __init__(self, version: str, key: Union[bytes, bytearray]) -> None: ...
    def insert(self, version: str, key: Union[bytes, bytearray]) -> None:
        """Adds a version; an existing version is never overwritten."""
    def set_active(self, version: str) -> None:
        """Makes an existing version the active one."""
    @property
    def active_version(self) -> str: ...
    @property
    def versions(self) -> List[str]: ...
    def __contains__(self, version: str) -> bool: ...
    def __len__(self) -> int: ...

class Placer:
    """A validated placement: tenant -> subset, as the gateway computes it."""

    def __init__(
        self,
        shards: Shards,
        k: int,
        key: Key,
        algorithm: str = "rendezvous",
        zones: Zones = None,
        overrides: Optional[Mapping[str, Union[int, Sequence[str]]]] = None,
        *,
        key_version: Optional[str] = None,
    ) -> None: ...
    def subset(self, tenant: str) -> List[int]:
        """The tenant's subset as shard indices, in selection order."""
    def subset_ids(self, tenant: str) -> List[str]:
        """The tenant's subset as shard ids, in selection order."""
    def k_for(self, tenant: str) -> int:
        """The subset size this tenant gets."""
    def place(self, tenants: Any) -> List[List[int]]:
        """Every tenant's subset, computed in parallel with the GIL released."""
    def _place_flat(self, tenants: Iterable[str]) -> bytearray: ...
    @property
    def n(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def zone_aware(self) -> bool: ...
    @property
    def shard_ids(self) -> List[str]: ...

def migration_diff(before: Placer, after: Placer, tenants: Iterable[str]) -> Dict[str, Any]: ...
def blast(
    *, tenants: Any, weights: Optional[Sequence[float]] = None, k: int, placement: Mapping[str, Any], **questions: Any
) -> Dict[str, Any]: ...
def plan(
    *,
    tenants: Any,
    max_degraded: float,
    max_fully_down: float,
    concurrent_failures: int,
    placement: Mapping[str, Any],
    weights: Optional[Sequence[float]] = None,
) -> Dict[str, Any]: ...
def migrate(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    tenants: Any,
    weights: Optional[Sequence[float]] = None,
    keys: Any = None,
) -> Dict[str, Any]: ...
