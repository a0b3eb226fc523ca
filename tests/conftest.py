from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


@pytest.fixture
def log_fixture():
    def read(name: str) -> list[str]:
        return (FIXTURES / name).read_text(errors="replace").splitlines()
    return read
