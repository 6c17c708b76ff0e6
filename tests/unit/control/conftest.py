import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pass_builders import TRUSTED


@pytest.fixture(autouse=True)
def one_operator() -> Iterator[None]:
    """Each test's passes are one new operator's: no victims chosen before it."""
    TRUSTED.clear()
    yield
    TRUSTED.clear()
