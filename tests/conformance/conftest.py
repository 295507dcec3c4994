import pytest

from . import releases
from .reference_client import ReferenceUnavailable, SglangReference


def _start(release: str) -> SglangReference:
    # Conformance tests run only when selected (`-m conformance`); once selected, a
    # missing reference environment is a failure, not a skip.
    try:
        return SglangReference(release=release)
    except ReferenceUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def sglang_ref():
    """SGLang 0.5.23's reference (the hand-checked rounds' numbers are 0.5.23's)."""
    ref = _start(releases.DEFAULT)
    yield ref
    ref.close()


@pytest.fixture(scope="session", params=releases.selected())
def release_ref(request):
    """One reference per release held to a model profile (KVF_RELEASES narrows them)."""
    ref = _start(request.param)
    yield ref
    ref.close()
