import pytest

from .reference_client import ReferenceUnavailable, SglangReference


@pytest.fixture(scope="session")
def sglang_ref():
    # Conformance tests run only when selected (`-m conformance`); once selected, a
    # missing reference environment is a failure, not a skip.
    try:
        ref = SglangReference()
    except ReferenceUnavailable as exc:
        pytest.fail(str(exc))
    yield ref
    ref.close()
