"""Test inputs written on demand into a test's temporary folder."""


def file_with(name: str, data: bytes):
    """A maker for `pytest.mark.parametrize`: writes `data` to `name` under the folder given."""

    def make(d):
        (d / name).write_bytes(data)
        return d / name

    return make
