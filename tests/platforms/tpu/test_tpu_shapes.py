"""Bucketing math and the static-shape settings of pagoda-tpu (no torch_xla needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pagoda_tpu", reason="pagoda-tpu is not installed")

from pagoda_tpu.shapes import (  # noqa: E402
    DEFAULT_CACHE_DIR,
    StaticShapeConfig,
    StepShapes,
    bucket,
    buckets,
    next_power_of_two,
)


def test_next_power_of_two() -> None:
    assert [next_power_of_two(n) for n in (0, 1, 2, 3, 4, 5, 16, 17, 1000)] == [
        1, 1, 2, 4, 4, 8, 16, 32, 1024]


@pytest.mark.parametrize(("n", "expected"), [
    (1, 16), (16, 16), (17, 32), (33, 64), (100, 128), (129, 256), (300, 300), (301, 301),
])
def test_bucket_rounds_up_to_a_power_of_two_capped_by_the_limit(n: int, expected: int) -> None:
    assert bucket(n, minimum=16, limit=300) == expected


def test_bucket_never_cuts() -> None:
    assert all(bucket(n, 8, 100) >= n for n in range(1, 300))
    assert bucket(5, minimum=64, limit=32) == 32  # a minimum above the limit: the limit


def test_buckets_list_every_size_bucket_returns() -> None:
    for minimum, limit in ((16, 2048), (16, 300), (8, 8), (64, 32), (1, 5)):
        assert buckets(minimum, limit) == sorted({bucket(n, minimum, limit)
                                                  for n in range(1, limit + 1)})
    assert buckets(16, 300) == [16, 32, 64, 128, 256, 300]


def test_step_shapes_bucket_each_dimension_against_its_limit() -> None:
    shapes = StepShapes(StaticShapeConfig(min_tokens=16, min_seqs=4, min_blocks=8),
                        max_tokens=512, max_seqs=6, max_blocks=20)
    assert [shapes.tokens(n) for n in (1, 17, 512)] == [16, 32, 512]
    assert [shapes.seqs(n) for n in (1, 5, 6)] == [4, 6, 6]
    assert [shapes.blocks(n) for n in (1, 9, 17)] == [8, 16, 20]


def test_config_defaults() -> None:
    config = StaticShapeConfig.from_env({})
    assert (config.min_tokens, config.min_seqs, config.min_blocks) == (16, 8, 8)
    assert config.cache_dir == DEFAULT_CACHE_DIR.expanduser()


def test_config_from_env(tmp_path: Path) -> None:
    config = StaticShapeConfig.from_env({
        "PAGODA_TPU_MIN_TOKENS": "64", "PAGODA_TPU_MIN_SEQS": "1", "PAGODA_TPU_MIN_BLOCKS": "4",
        "PAGODA_TPU_CACHE_DIR": str(tmp_path)})
    assert (config.min_tokens, config.min_seqs, config.min_blocks) == (64, 1, 4)
    assert config.cache_dir == tmp_path


@pytest.mark.parametrize("value", ["", "off", "OFF"])
def test_config_cache_can_be_turned_off(value: str) -> None:
    assert StaticShapeConfig.from_env({"PAGODA_TPU_CACHE_DIR": value}).cache_dir is None


@pytest.mark.parametrize(("name", "value", "message"), [
    ("PAGODA_TPU_MIN_TOKENS", "12", "PAGODA_TPU_MIN_TOKENS must be a power of two >= 1, got 12"),
    ("PAGODA_TPU_MIN_SEQS", "0", "PAGODA_TPU_MIN_SEQS must be a power of two >= 1, got 0"),
    ("PAGODA_TPU_MIN_BLOCKS", "-4", "PAGODA_TPU_MIN_BLOCKS must be a power of two >= 1"),
    ("PAGODA_TPU_MIN_TOKENS", "lots", "PAGODA_TPU_MIN_TOKENS must be an integer, got 'lots'"),
])
def test_config_rejects_bad_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StaticShapeConfig.from_env({name: value})


def test_config_rejects_non_integers_in_code() -> None:
    with pytest.raises(ValueError, match="MIN_SEQS must be a power of two"):
        StaticShapeConfig(min_seqs=True)  # type: ignore[arg-type]
