"""The preflight's arithmetic (the all-reduce itself runs in the Slurm cluster tests)."""

import pytest

from launcher.inside.allreduce import bus_bandwidth_gbps


@pytest.mark.parametrize(("world", "expected"), [(2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_follows_nccl_tests(world, expected):
    # NCCL-tests: busbw = algbw * 2(n-1)/n; 1 GB in 1 s is an algorithm bandwidth of 1 GB/s.
    assert bus_bandwidth_gbps(10**9, 1.0, world) == pytest.approx(expected)


def test_no_time_means_no_bandwidth():
    assert bus_bandwidth_gbps(10**9, 0.0, 4) == 0.0
