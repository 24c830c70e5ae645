"""Recipe 12.1 from Python: the 3,000 shared vectors, a property test against
the chapter's own Python, and bad input."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shuffle_shard
from shuffle_shard import shuffle_shards

VECTOR_COUNT = 3000


def recipe_12_1(tenant_id: str, n: int = 64, k: int = 3, *, key: bytes = b"shuffle-shard-v1") -> list:
    """The design chapter's Recipe 12.1, as the chapter prints it: the reference."""
    if not 1 <= k <= n:
        raise ValueError("k must be in 1..n")
    chosen: list = []
    seen: set = set()
    counter = 0
    accept_below = ((1 << 64) // n) * n
    while len(chosen) < k:
        payload = tenant_id.encode() + b"\0" + counter.to_bytes(8, "big")
        digest = hmac.new(key, payload, hashlib.sha256).digest()
        counter += 1
        for offset in range(0, 32, 8):
            word = int.from_bytes(digest[offset : offset + 8], "big")
            if word >= accept_below:
                continue
            idx = word % n
            if idx in seen:
                continue
            seen.add(idx)
            chosen.append(idx)
            if len(chosen) >= k:
                break
    return chosen


def test_every_shared_vector(repo):
    path = repo / "crates" / "placement" / "tests" / "data" / "recipe-12-1.jsonl"
    checked = 0
    # Split on newlines only: tenants hold characters str.splitlines() breaks at.
    for line_no, line in enumerate(path.read_text(encoding="utf-8").rstrip("\n").split("\n"), start=1):
        vector = json.loads(line)
        key = bytes.fromhex(vector["key_hex"])
        got = shuffle_shards(vector["tenant"], vector["n"], vector["k"], key=key)
        assert got == vector["shards"], f"vector line {line_no}"
        checked += 1
    assert checked == VECTOR_COUNT


def test_the_reference_is_the_recipe(repo):
    # The property test below trusts recipe_12_1; check it against a slice of
    # the vectors (all of them take a while in pure Python for n near 10^6).
    path = repo / "crates" / "placement" / "tests" / "data" / "recipe-12-1.jsonl"
    for line in path.read_text(encoding="utf-8").split("\n")[:300]:
        vector = json.loads(line)
        key = bytes.fromhex(vector["key_hex"])
        assert recipe_12_1(vector["tenant"], vector["n"], vector["k"], key=key) == vector["shards"]


def test_defaults_are_the_chapters():
    assert shuffle_shards("tenant-1") == recipe_12_1("tenant-1")
    assert shuffle_shard.RECIPE_KEY == b"shuffle-shard-v1"
    assert shuffle_shards("a", 10, 4) == [0, 9, 2, 1]


@settings(max_examples=400, deadline=None)
@given(
    tenant=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
    key=st.binary(max_size=100),
    n=st.integers(min_value=1, max_value=2_000_000),
    data=st.data(),
)
def test_matches_the_chapters_python(tenant, key, n, data):
    k = data.draw(st.integers(min_value=1, max_value=min(n, 24)), label="k")
    assert shuffle_shards(tenant, n, k, key=key) == recipe_12_1(tenant, n, k, key=key)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(min_value=1, max_value=40), tenant=st.text(max_size=10).filter(lambda t: "\ud800" not in t))
def test_k_equals_n_is_a_permutation(n, tenant):
    tenant = tenant.encode("utf-8", "ignore").decode("utf-8")
    assert sorted(shuffle_shards(tenant, n, n, key=b"k")) == list(range(n))


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        (("t", 5, 6), {}, ValueError),  # k > n
        (("t", 5, 0), {}, ValueError),
        (("t", 5, -1), {}, ValueError),
        (("t", 0, 1), {}, ValueError),
        (("t", -3, 1), {}, ValueError),
        (("t", 2**80, 3), {}, ValueError),
        (("t", 5, 2**100), {}, ValueError),
        ((7, 5, 2), {}, TypeError),
        ((None, 5, 2), {}, TypeError),
        ((b"t", 5, 2), {}, TypeError),
        (("t", "5", 2), {}, TypeError),
        (("t", 5.0, 2), {}, TypeError),
        (("t", 5, True), {}, TypeError),
        (("t", 5, 2), {"key": "text"}, TypeError),
        (("t", 5, 2), {"key": 5}, TypeError),
        (("\ud800", 5, 2), {}, ValueError),  # a lone surrogate: UnicodeEncodeError, as in the recipe
    ],
)
def test_bad_input_raises(args, kwargs, error):
    with pytest.raises(error):
        shuffle_shards(*args, **kwargs)


def test_k_out_of_range_says_how_to_fix_it():
    with pytest.raises(ValueError, match=r"^k = 6 is out of range for 5 shards: choose k between 1 and 5$"):
        shuffle_shards("t", 5, 6)
    with pytest.raises(TypeError, match="key must be bytes, not str"):
        shuffle_shards("t", 5, 2, key="secret")
