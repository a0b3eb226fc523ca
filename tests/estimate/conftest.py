import pytest

from launcher.estimate import calibration as cal


@pytest.fixture(scope="session")
def calibration_results() -> tuple[cal.Result, ...]:
    """Every calibration run evaluated once (tens of seconds): both calibration test files read the same results,
    so they share one xdist group (tests/conftest.py) and this fixture. A tuple: no test can change it."""
    return tuple(cal.evaluate_all())
