"""Every test of the masked-method parts runs on one thread (`tests.conftest.one_thread`)."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    pass
