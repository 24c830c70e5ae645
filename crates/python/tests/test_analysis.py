"""blast, plan and migrate from Python give the command line's --json, and
bad input raises with the command line's messages."""

from __future__ import annotations

import re
import subprocess

import pytest

import shuffle_shard
from shuffle_shard import KeyRing

WEIGHTED = [(f"tenant-{i}", float(1 + (i * 7919) % 13)) for i in range(1500)] + [("whale", 400.0)]


@pytest.fixture
def weighted_file(tmp_path):
    path = tmp_path / "tenants.tsv"
    path.write_text("".join(f"{tenant}\t{weight!r}\n" for tenant, weight in WEIGHTED))
    return str(path)


@pytest.fixture
def key_files(tmp_path):
    first, second = tmp_path / "v1.key", tmp_path / "v2.key"
    first.write_bytes(b"first placement secret")
    second.write_bytes(b"second placement secret")
    return str(first), str(second)


def test_blast_failure_sets_and_sweep(cli):
    expected = cli("blast", "--shards", "16", "--k", "2", "--tenants", "2000", "--fail", "3,7", "--fail", "0, 1", "--sweep", "2")
    got = shuffle_shard.blast(shards=16, k=2, tenants=2000, fail=["3,7", "0, 1"], sweep=2)
    assert got == expected
    # Failure sets as lists name themselves by their ids.
    assert shuffle_shard.blast(shards=16, k=2, tenants=2000, fail=[[3, 7], ["0", "1"]], sweep=2)["scenarios"][0] == expected["scenarios"][0]


def test_blast_sampled_sweep_with_a_key_and_rendezvous(cli, key_files):
    first, _ = key_files
    expected = cli(
        "blast", "--shards", "32", "--k", "3", "--tenants", "3000", "--sweep", "3", "--max-sets", "500",
        "--seed", "7", "--algorithm", "rendezvous", "--key-file", first,
    )
    got = shuffle_shard.blast(
        shards=32, k=3, tenants=3000, sweep=3, max_sets=500, seed=7, algorithm="rendezvous",
        key=b"first placement secret",
    )
    assert got == expected
    assert got["sweep"]["sampled"] is True


def test_blast_zone_outage(cli):
    expected = cli("blast", "--zones", "a:8,b:8,c:8", "--k", "3", "--tenants", "5000", "--zone-outage")
    assert shuffle_shard.blast(zones="a:8,b:8,c:8", k=3, tenants=5000, zone_outage=True) == expected


def test_blast_weighted_load_and_poison(cli, weighted_file):
    args = [
        "blast", "--shards", "32", "--k", "2", "--tenant-k", "whale=8", "--tenants-file", weighted_file,
        "--capacity", "150", "--poison", "whale", "--poison", "stranger", "--poison-after", "2", "--poison-sweep",
        "--poison-top", "4",
    ]
    expected = cli(*args)
    options = dict(
        shards=32, k=2, tenant_k={"whale": 8}, capacity=150, poison=["whale", "stranger"], poison_after=2,
        poison_sweep=True, poison_top=4,
    )
    assert shuffle_shard.blast(tenants=WEIGHTED, **options) == expected
    assert expected["load"] is not None and expected["poison_sweep"] is not None
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(WEIGHTED, columns=["tenant", "weight"])
    assert shuffle_shard.blast(tenants=frame, **options) == expected


def test_blast_waves(cli, tmp_path):
    waves = {str(shard): f"wave-{shard % 3}" for shard in range(12)}
    path = tmp_path / "waves.txt"
    path.write_text("".join(f"{shard} {wave}\n" for shard, wave in waves.items()))
    expected = cli("blast", "--shards", "12", "--k", "2", "--tenants", "1000", "--waves", str(path))
    assert shuffle_shard.blast(shards=12, k=2, tenants=1000, waves=waves) == expected
    assert shuffle_shard.blast(shards=12, k=2, tenants=1000, waves=path.read_text()) == expected


def test_plan(cli, weighted_file):
    expected = cli(
        "plan", "--shards", "16", "--tenants", "2000", "--max-degraded", "0.2", "--max-fully-down", "0.001",
        "--concurrent-failures", "2",
    )
    assert shuffle_shard.plan(
        shards=16, tenants=2000, max_degraded=0.2, max_fully_down=0.001, concurrent_failures=2
    ) == expected
    expected = cli(
        "plan", "--zones", "a:6,b:6", "--tenants-file", weighted_file, "--tenant-k", "whale=8",
        "--max-degraded", "0.5", "--max-fully-down", "0.0001", "--concurrent-failures", "2", "--algorithm", "rendezvous",
    )
    got = shuffle_shard.plan(
        zones="a:6,b:6", tenants=WEIGHTED, tenant_k={"whale": 8}, max_degraded=0.5, max_fully_down=0.0001,
        concurrent_failures=2, algorithm="rendezvous",
    )
    assert got == expected


def test_migrate(cli, key_files):
    expected = cli(
        "migrate", "--from", "shards=20 k=3 algorithm=rendezvous", "--to", "shards=21 k=3 algorithm=rendezvous",
        "--tenants", "5000",
    )
    got = shuffle_shard.migrate(
        {"shards": 20, "k": 3, "algorithm": "rendezvous"}, {"shards": 21, "k": 3, "algorithm": "rendezvous"}, tenants=5000
    )
    assert got == expected
    first, second = key_files
    expected = cli(
        "migrate", "--from", "shards=64 k=3 key=v1", "--to", "zones=a:32,b:32 k=3 key=v2 algorithm=rendezvous",
        "--key", f"v1={first}", "--key", f"v2={second}", "--tenants", "3000",
    )
    assert expected["comparison"] is None
    before = {"shards": 64, "k": 3, "key": "v1"}
    after = {"zones": "a:32,b:32", "k": 3, "key": "v2", "algorithm": "rendezvous"}
    keys = {"v1": b"first placement secret", "v2": b"second placement secret"}
    assert shuffle_shard.migrate(before, after, tenants=3000, keys=keys) == expected
    ring = KeyRing("v1", b"first placement secret")
    ring.insert("v2", b"second placement secret")
    assert shuffle_shard.migrate(before, after, tenants=3000, keys=ring) == expected


def reason(message: str) -> str:
    """What was wrong, without the advice on how to fix it (which names
    flags on the command line and arguments in Python)."""
    return re.split(r"; |, e\.g\.", message)[0]


@pytest.mark.parametrize(
    "cli_args, call, renames",
    [
        (["blast", "--shards", "16", "--k", "17", "--tenants", "10"], lambda: shuffle_shard.blast(shards=16, k=17, tenants=10), {}),
        (["blast", "--zones", "a:2,b", "--k", "1", "--tenants", "10"], lambda: shuffle_shard.blast(zones="a:2,b", k=1, tenants=10), {}),
        (["blast", "--shards", "16", "--k", "2", "--algorithm", "modulo", "--tenants", "10"],
         lambda: shuffle_shard.blast(shards=16, k=2, algorithm="modulo", tenants=10), {}),
        (["blast", "--shards", "16", "--k", "2", "--tenants", "10", "--fail", "3,99"],
         lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, fail=["3,99"]), {"--fail": "fail"}),
        (["blast", "--shards", "16", "--k", "2", "--tenants", "10", "--fail", "3,,4"],
         lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, fail=["3,,4"]), {"--fail": "fail"}),
        # Issue 21's refusals live in the analysis crate, so Python refuses
        # what the command line refuses, in the same words.
        (["blast", "--shards", "16", "--k", "2", "--tenants", "10", "--fail", "3,3"],
         lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, fail=["3,3"]), {"--fail": "fail"}),
        (["blast", "--shards", "16", "--k", "2", "--tenants", "10", "--fail", "3,4,3"],
         lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, fail=[[3, 4, 3]]), {"--fail": "fail"}),
        (["blast", "--shards", "16", "--k", "2", "--tenants", "10", "--tenant-k", "ghost=4"],
         lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, tenant_k={"ghost": 4}),
         {"--tenant-k ghost=4": 'tenant_k["ghost"]'}),
        (["plan", "--shards", "8", "--tenants", "10", "--max-degraded", "0.5", "--max-fully-down", "0.5",
          "--concurrent-failures", "2", "--tenant-k", "ghost=3"],
         lambda: shuffle_shard.plan(shards=8, tenants=10, max_degraded=0.5, max_fully_down=0.5, concurrent_failures=2,
                                    tenant_k={"ghost": 3}),
         {"--tenant-k ghost=3": 'tenant_k["ghost"]'}),
        (["plan", "--shards", "16", "--tenants", "100", "--max-degraded", "1.5", "--max-fully-down", "0.1", "--concurrent-failures", "2"],
         lambda: shuffle_shard.plan(shards=16, tenants=100, max_degraded=1.5, max_fully_down=0.1, concurrent_failures=2),
         {"--max-degraded ": "max_degraded="}),
        (["migrate", "--from", "shards=8 k=9", "--to", "shards=8 k=2", "--tenants", "10"],
         lambda: shuffle_shard.migrate({"shards": 8, "k": 9}, {"shards": 8, "k": 2}, tenants=10), {"--from": "before"}),
        (["migrate", "--from", "shards=8 k=2 key=v3", "--to", "shards=8 k=2", "--tenants", "10"],
         lambda: shuffle_shard.migrate({"shards": 8, "k": 2, "key": "v3"}, {"shards": 8, "k": 2}, tenants=10),
         {"--from": "before"}),
    ],
)
def test_bad_input_gives_the_command_lines_message(cli, cli_args, call, renames):
    from conftest import _cli_binary

    done = subprocess.run([str(_cli_binary()), *cli_args], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line
    expected = line[len("error: "):]
    for flag, name in renames.items():
        expected = expected.replace(flag, name)
    with pytest.raises(ValueError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message
    if renames:
        assert reason(message) == reason(expected)
    else:
        assert message == expected


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=0), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=["a", "a"]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[("a", 1.0), ("b", -2.0)]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[("a", 1.0), ("b", 1e-320)]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[("a", 1e308), ("b", 1e308)]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[("a", 1.0), "b"]), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants="abc"), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[1, 2]), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, sweep=0), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, sweep=17), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, max_sets=0, sweep=1), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, zone_outage=True), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, capacity=5), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=[("a", 1.0)], capacity=-5), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, poison_after=1), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, poison=[""]), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, poison="acme"), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, fail="3,4"), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, waves={"0": "w"}), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, key=b""), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, key="text"), TypeError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, tenant_k={"a": 0}), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, tenant_k={"a": 17}), ValueError),
        (lambda: shuffle_shard.blast(shards=16, k=2, tenants=10, colour="red"), TypeError),
        (lambda: shuffle_shard.plan(shards=16, tenants=10, max_degraded=0.2, max_fully_down=0.1, concurrent_failures=0), ValueError),
        (lambda: shuffle_shard.plan(shards=16, tenants=10, max_degraded=0.2, max_fully_down=0.1, concurrent_failures=17), ValueError),
        (lambda: shuffle_shard.plan(shards=16, tenants=10, max_degraded="x", max_fully_down=0.1, concurrent_failures=1), TypeError),
        (lambda: shuffle_shard.migrate({"shards": 8}, {"shards": 8, "k": 2}, tenants=10), ValueError),
        (lambda: shuffle_shard.migrate({"k": 2}, {"shards": 8, "k": 2}, tenants=10), ValueError),
        (lambda: shuffle_shard.migrate({"shards": 8, "k": 2, "colour": 1}, {"shards": 8, "k": 2}, tenants=10), ValueError),
        (lambda: shuffle_shard.migrate("shards=8 k=2", {"shards": 8, "k": 2}, tenants=10), TypeError),
        (lambda: shuffle_shard.migrate({"shards": 8, "k": 2, "key": "v1"}, {"shards": 8, "k": 2}, tenants=10, keys={"v1": b""}), ValueError),
        (lambda: shuffle_shard.migrate({"shards": 8, "k": 2}, {"shards": 8, "k": 2}, tenants=10, keys={"recipe": b"x", "v1": b"y"}), ValueError),
    ],
)
def test_bad_analysis_input_raises(call, error):
    with pytest.raises(error):
        call()


def test_dataframe_needs_a_tenant_column():
    pandas = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match="'tenant' column"):
        shuffle_shard.blast(shards=16, k=2, tenants=pandas.DataFrame({"id": ["a"]}))
    ids_only = pandas.DataFrame({"tenant": [f"t{i}" for i in range(100)]})
    assert shuffle_shard.blast(shards=16, k=2, tenants=ids_only) == shuffle_shard.blast(
        shards=16, k=2, tenants=[f"t{i}" for i in range(100)]
    )
