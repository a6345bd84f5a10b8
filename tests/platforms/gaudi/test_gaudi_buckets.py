"""Gaudi's static-shape buckets: the sizes each strategy produces, padding, and the checks
on a configuration from code or from PAGODA_GAUDI_BUCKETS_*."""

from __future__ import annotations

import pytest

pytest.importorskip("pagoda_gaudi", reason="pagoda-gaudi is not installed")

from pagoda_gaudi.bucketing import (  # noqa: E402
    BucketConfig,
    BucketConfigError,
    BucketRange,
    padded,
)


@pytest.mark.parametrize(("bucket_range", "linear", "exponential"), [
    (BucketRange(1, 32, 256), [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256],
     [1, 2, 4, 8, 16, 32, 64, 128, 256]),
    (BucketRange(128, 1024, 4096), [128, 256, 512, 1024, 2048, 3072, 4096],
     [128, 256, 512, 1024, 2048, 4096]),
    (BucketRange(3, 32, 100), [3, 6, 12, 24, 32, 64, 96, 100], [3, 8, 16, 32, 64, 100]),
    (BucketRange(100, 64, 300), [100, 128, 192, 256, 300], [100, 192, 300]),
    (BucketRange(8, 8, 8), [8], [8]),
])
def test_strategies(bucket_range: BucketRange, linear: list[int], exponential: list[int]) -> None:
    assert bucket_range.linear() == linear
    assert bucket_range.exponential() == exponential


def test_exponential_limit_spaces_geometrically() -> None:
    # 128 * 64 ** (i / 4) = 362, 1024, 2896: rounded up to multiples of 256.
    assert BucketRange(128, 256, 8192, limit=5).exponential() == [128, 512, 1024, 3072, 8192]
    assert BucketRange(128, 256, 8192, limit=2).exponential() == [128, 8192]


def test_padding() -> None:
    config = BucketConfig()
    assert config.pad(1, 1) == (1, 128)
    assert config.pad(3, 300) == (4, 512)
    assert config.pad(256, 8192) == (256, 8192)
    with pytest.raises(ValueError, match="257 exceeds the largest bucket 256"):
        config.pad(257, 300)
    assert padded(33, [32, 64, 96]) == 64


def test_linear_config() -> None:
    config = BucketConfig(batch_size=BucketRange(1, 16, 64), tokens=BucketRange(64, 64, 256),
                          strategy="linear")
    assert config.buckets(config.batch_size) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert config.pad(17, 65) == (32, 128)


def test_validation_lists_every_problem() -> None:
    assert BucketConfig().validate() == []
    config = BucketConfig(batch_size=BucketRange(0, 32, 512),
                          tokens=BucketRange(128, 256, 64, limit=1), strategy="cubic")
    assert config.validate() == [
        "batch size: min must be >= 1, got 0",
        "tokens: max 64 is below min 128",
        "tokens: limit must be >= 2 (min and max), got 1",
        "strategy must be one of exponential, linear, got 'cubic'",
        "tokens max 64 is below batch size max 512 (a step of decodes has a token per sequence)",
    ]


def test_from_env() -> None:
    assert BucketConfig.from_env({}) == BucketConfig()
    config = BucketConfig.from_env({"PAGODA_GAUDI_BUCKETS_BATCH": "1,8,64",
                                    "PAGODA_GAUDI_BUCKETS_TOKENS": "64, 128, 4096, 6",
                                    "PAGODA_GAUDI_BUCKETS_STRATEGY": "linear"})
    assert config == BucketConfig(BucketRange(1, 8, 64), BucketRange(64, 128, 4096, 6), "linear")


@pytest.mark.parametrize(("environ", "message"), [
    ({"PAGODA_GAUDI_BUCKETS_BATCH": "1,32"},
     "invalid Gaudi buckets: PAGODA_GAUDI_BUCKETS_BATCH='1,32' must be MIN,STEP,MAX or "
     "MIN,STEP,MAX,LIMIT (integers)"),
    ({"PAGODA_GAUDI_BUCKETS_TOKENS": "a,b,c"},
     "invalid Gaudi buckets: PAGODA_GAUDI_BUCKETS_TOKENS='a,b,c' must be"),
    ({"PAGODA_GAUDI_BUCKETS_BATCH": "1,32,16384"},
     "invalid Gaudi buckets: tokens max 8192 is below batch size max 16384"),
    ({"PAGODA_GAUDI_BUCKETS_STRATEGY": "geometric"},
     "invalid Gaudi buckets: strategy must be one of exponential, linear, got 'geometric'"),
])
def test_from_env_rejects(environ: dict[str, str], message: str) -> None:
    with pytest.raises(BucketConfigError) as err:
        BucketConfig.from_env(environ)
    assert str(err.value).startswith(message)
