import pytest

from . import releases
from .reference_client import ReferenceUnavailable, SglangReference

#: one warm reference process per release for the whole session (an import of SGLang
#: takes seconds; the fixtures below share them)
_REFS: dict[str, SglangReference] = {}


def _start(release: str) -> SglangReference:
    # Conformance tests run only when selected (`-m conformance`); once selected, a
    # missing reference environment is a failure, not a skip.
    if release not in _REFS:
        try:
            _REFS[release] = SglangReference(release=release)
        except ReferenceUnavailable as exc:
            pytest.fail(str(exc))
    return _REFS[release]


@pytest.fixture(scope="session", autouse=True)
def _close_references():
    yield
    while _REFS:
        _REFS.popitem()[1].close()


@pytest.fixture(scope="session")
def sglang_ref():
    """SGLang 0.5.23's reference (the hand-checked rounds' numbers are 0.5.23's)."""
    return _start(releases.DEFAULT)


@pytest.fixture(scope="session", params=releases.selected())
def release_ref(request):
    """One reference per release held to a model profile (KVF_RELEASES narrows them)."""
    return _start(request.param)


@pytest.fixture(scope="session", params=[r for r in releases.selected() if r != releases.DEFAULT])
def other_release_ref(request):
    """The references of the releases before 0.5.23."""
    return _start(request.param)
