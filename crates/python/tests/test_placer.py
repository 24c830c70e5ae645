"""The Placer, KeyRing and migration.diff from Python."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shuffle_shard
from shuffle_shard import KeyRing, Placer, migration

KEY = b"python test key"
tenant_ids = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def test_subset_ids_and_batch_agree():
    placer = Placer(64, 3, KEY)
    tenants = [f"tenant-{i}" for i in range(2000)]
    batch = placer.place(tenants)
    assert batch == [placer.subset(t) for t in tenants]
    ids = placer.shard_ids
    assert placer.subset_ids("acme") == [ids[i] for i in placer.subset("acme")]
    assert all(len(set(s)) == 3 and all(0 <= i < 64 for i in s) for s in batch)


def test_hmac_modulo_placer_is_the_recipe():
    placer = Placer(40, 5, KEY, algorithm="hmac-modulo")
    for tenant in ["a", "", "tenant-1", "\u00e9t\u00e9", "x" * 200]:
        assert placer.subset(tenant) == shuffle_shard.shuffle_shards(tenant, 40, 5, key=KEY)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=60),
    key=st.binary(min_size=1, max_size=40).filter(lambda key: any(key)),
    tenants=st.lists(tenant_ids, min_size=1, max_size=40),
    data=st.data(),
)
def test_adding_a_shard_moves_at_most_one_member_onto_it(n, key, tenants, data):
    k = data.draw(st.integers(min_value=1, max_value=n), label="k")
    ids = [f"shard-{i}" for i in range(n)]
    before = Placer(ids, k, key)
    after = Placer(ids + ["new"], k, key)
    for tenant in tenants:
        old, new = set(before.subset_ids(tenant)), set(after.subset_ids(tenant))
        assert new - old <= {"new"}, tenant
        assert len(old - new) <= 1, tenant
    diff = migration.diff(before, after, tenants)
    assert diff["members_moved"] == diff["changed"]
    assert all(move["added"] == ["new"] for move in diff["moves"])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=60),
    key=st.binary(min_size=1, max_size=40).filter(lambda key: any(key)),
    tenant=tenant_ids,
    data=st.data(),
)
def test_rendezvous_subsets_nest(n, key, tenant, data):
    # Rendezvous ranks shards by score, so the top k + 1 starts with the top k.
    k = data.draw(st.integers(min_value=1, max_value=n - 1), label="k")
    smaller = Placer(n, k, key).subset(tenant)
    larger = Placer(n, k + 1, key).subset(tenant)
    assert larger[:k] == smaller


def test_reordering_the_fleet_moves_nobody():
    ids = [f"s{i}" for i in range(30)]
    forward, backward = Placer(ids, 3, KEY), Placer(list(reversed(ids)), 3, KEY)
    for i in range(500):
        assert set(forward.subset_ids(f"t{i}")) == set(backward.subset_ids(f"t{i}"))


def test_zones_weights_and_overrides():
    zoned = Placer(None, 3, KEY, zones="a:4,b:4,c:4")
    for i in range(200):
        zones = {int(shard) // 4 for shard in zoned.subset_ids(f"t{i}")}
        assert zones == {0, 1, 2}
    by_dict = Placer(["x", "y", "z", "w"], 2, KEY, zones={"x": "a", "y": "a", "z": "b", "w": "b"})
    assert by_dict.zone_aware
    weighted = Placer([("light", 1.0), ("heavy", 3.0)], 1, KEY)
    heavy = sum(weighted.subset_ids(f"t{i}") == ["heavy"] for i in range(4000))
    assert 2800 < heavy < 3200  # expected 3,000; sd ~27
    placer = Placer(16, 2, KEY, overrides={"whale": 6, "vip": ["15", "3"]})
    assert len(placer.subset("whale")) == 6 and placer.k_for("whale") == 6
    assert placer.subset_ids("vip") == ["15", "3"]
    assert len(placer.place(["whale", "minnow"])[1]) == 2


def test_tenant_forms_pairs_and_dataframes():
    placer = Placer(32, 3, KEY)
    ids = [f"t{i}" for i in range(50)]
    expected = placer.place(ids)
    assert placer.place(iter(ids)) == expected
    assert placer.place([(t, 1.5) for t in ids]) == expected
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"tenant": ids, "weight": [1.0] * 50})
    assert placer.place(frame) == expected


def test_place_array_fills_numpy():
    numpy = pytest.importorskip("numpy")
    placer = Placer(64, 3, KEY)
    ids = [f"t{i}" for i in range(1000)]
    array = placer.place_array(ids)
    assert array.shape == (1000, 3) and array.dtype == numpy.uint32
    assert array.tolist() == placer.place(ids)
    out = numpy.zeros((1000, 3), dtype=numpy.uint32)
    assert placer.place_array(ids, out=out) is out
    assert out.tolist() == placer.place(ids)
    with pytest.raises(ValueError, match="shape"):
        placer.place_array(ids, out=numpy.zeros((10, 3), dtype=numpy.uint32))
    varied = Placer(64, 3, KEY, overrides={"t5": 4})
    with pytest.raises(ValueError, match="use place"):
        varied.place_array(ids)
    assert placer.place_array([]).shape == (0, 3)


def test_key_ring_versions_and_placement():
    ring = KeyRing("v1", b"first secret")
    ring.insert("v2", b"second secret")
    assert ring.versions == ["v1", "v2"] and ring.active_version == "v1"
    ring.set_active("v2")
    assert ring.active_version == "v2" and "v1" in ring and len(ring) == 2
    assert Placer(64, 3, ring).subset("t") == Placer(64, 3, b"second secret").subset("t")
    assert Placer(64, 3, ring, key_version="v1").subset("t") == Placer(64, 3, b"first secret").subset("t")
    with pytest.raises(ValueError, match="already in the key ring"):
        ring.insert("v1", b"again")
    with pytest.raises(ValueError, match="not in the key ring"):
        ring.set_active("v9")
    with pytest.raises(ValueError, match="not in the key ring"):
        Placer(64, 3, ring, key_version="v9")
    with pytest.raises(ValueError, match="empty name"):
        KeyRing("", b"k")


def test_keys_never_in_repr():
    secret = b"super-secret-material"
    ring = KeyRing("v7", secret)
    placer = Placer(8, 2, secret)
    for text in [repr(ring), str(ring), repr(placer), str(placer)]:
        assert "super" not in text and secret.hex()[:8] not in text
    assert repr(ring) == "KeyRing(versions=['v7'], active='v7')"
    assert repr(placer) == "Placer(n=8, k=2, algorithm='rendezvous', zone_aware=False, overrides=0, key=<redacted>)"


def test_migration_diff_against_a_reference():
    before, after = Placer(20, 3, KEY), Placer(24, 4, KEY, algorithm="hmac-modulo")
    tenants = [f"t{i}" for i in range(300)]
    diff = migration.diff(before, after, tenants)
    moves = []
    for t in tenants:
        old, new = before.subset_ids(t), after.subset_ids(t)
        added = [s for s in new if s not in old]
        removed = [s for s in old if s not in new]
        if added or removed:
            moves.append({"tenant": t, "added": added, "removed": removed})
    assert diff["moves"] == moves
    assert diff["tenants"] == 300 and diff["changed"] == len(moves)
    assert diff["members_moved"] == sum(len(m["added"]) for m in moves)
    assert diff["members_removed"] == sum(len(m["removed"]) for m in moves)


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((8, 9, KEY), {}, ValueError, "out of range"),
        ((8, 0, KEY), {}, ValueError, "out of range"),
        ((0, 1, KEY), {}, ValueError, "nothing to place"),
        ((8, 2, b""), {}, ValueError, "the key is empty"),
        ((8, 2, b"\0\0\0"), {}, ValueError, "all zero"),
        ((8, 2, "text key"), {}, TypeError, "bytes, not str"),
        ((8, 2, None), {}, TypeError, "bytes"),
        ((8, "2", KEY), {}, TypeError, "int"),
        (("8", 2, KEY), {}, TypeError, "shard ids"),
        ((8, 2, KEY), {"algorithm": "modulo"}, ValueError, "unknown algorithm"),
        ((["a", "a"], 1, KEY), {}, ValueError, "appears twice"),
        ((["a", ""], 1, KEY), {}, ValueError, "empty id"),
        (([("a", -1.0)], 1, KEY), {}, ValueError, "positive"),
        (([("a", 2.0), ("b", 1.0)], 1, KEY), {"algorithm": "hmac-modulo"}, ValueError, "rendezvous"),
        (([1, 2], 1, KEY), {}, TypeError, "str id"),
        ((None, 2, KEY), {}, ValueError, "give the fleet"),
        ((None, 2, KEY), {"zones": "a:2,b"}, ValueError, "invalid zone spec"),
        ((5, 2, KEY), {"zones": "a:2,b:2"}, ValueError, "does not match"),
        ((8, 2, KEY), {"overrides": {"t": ["99"]}}, ValueError, "not in the fleet"),
        ((8, 2, KEY), {"overrides": {"t": 9}}, ValueError, "out of range"),
        ((8, 2, KEY), {"overrides": {"t": 2.5}}, TypeError, "list of shard ids"),
        ((8, 2, KEY), {"overrides": ["t"]}, TypeError, "dict"),
        ((8, 2, KEY), {"key_version": "v1"}, TypeError, "KeyRing"),
    ],
)
def test_bad_placers_raise(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        Placer(*args, **kwargs)


def test_bad_tenants_raise():
    placer = Placer(8, 2, KEY)
    for bad, error in [(5, TypeError), ("tenant", TypeError), ([1, 2], TypeError), ([("a", 1), "b"], TypeError), (None, TypeError)]:
        with pytest.raises(error):
            placer.place(bad)
    with pytest.raises(TypeError):
        placer.subset(5)
    with pytest.raises(TypeError):
        migration.diff(placer, "not a placer", ["a"])


def test_batch_placement_releases_the_gil():
    # With a switch interval far longer than the test, a second thread can
    # only run while the main thread has released the GIL itself: if it
    # counted during place(), place() released it.
    import sys
    import threading

    placer = Placer(64, 3, KEY)
    tenants = [f"tenant-{i}" for i in range(200_000)]
    count = [0]
    running, stop = threading.Event(), threading.Event()

    def heartbeat():
        running.set()
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)  # releases and retakes the GIL each beat

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    worker = threading.Thread(target=heartbeat)
    try:
        worker.start()
        running.wait()
        before = count[0]
        placer.place(tenants)
        during = count[0] - before
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert during > 0
