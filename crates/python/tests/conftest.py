"""Shared fixtures: the repository's paths and the built `shuffle-shard` binary."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def _cli_binary() -> Path | None:
    configured = os.environ.get("SHUFFLE_SHARD_BIN")
    if configured:
        path = Path(configured)
        if not path.is_file():
            pytest.fail(f"SHUFFLE_SHARD_BIN={configured} is not a file; build it with `cargo build -p shuffle-shard-cli`")
        return path
    if os.environ.get("SHUFFLE_SHARD_REQUIRE_CLI"):
        pytest.fail("SHUFFLE_SHARD_BIN is not set: CI must point it at target/debug/shuffle-shard")
    fallback = REPO / "target" / "debug" / "shuffle-shard"
    return fallback if fallback.is_file() else None


@pytest.fixture(scope="session")
def cli():
    """Runs `shuffle-shard ARGS --json` and returns the parsed answer."""
    binary = _cli_binary()
    if binary is None:
        pytest.skip("no shuffle-shard binary: set SHUFFLE_SHARD_BIN or run `cargo build -p shuffle-shard-cli`")

    def run(*args: str) -> dict:
        done = subprocess.run(
            [str(binary), *args, "--json"], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"shuffle-shard {' '.join(args)}: {done.stderr}"
        return json.loads(done.stdout)

    return run
