"""A ``--formats`` file whose settings have the wrong type is one line naming the
setting's path, before any entry is built."""

import pytest

from kvforensics.errors import InputError
from kvforensics.logs import load_catalogue

GOOD = "[[format]]\nname = 'mine'\nregex = '^x (?P<n>\\d+)'\n"


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("fields = 1\n", "format[0].fields"),
        ("fields = { n = 1 }\n", "format[0].fields.n"),
        ("pairs = 'x'\n", "format[0].pairs"),
        ("promote = 1\n", "format[0].promote"),
        ("absorb = 'x'\n", "format[0].absorb"),
        ("literal = 1\n", "format[0].literal"),
        ("samples = [1]\n", "format[0].samples[0]"),
        ("samples = [{ expect = {} }]\n", "format[0].samples[0].line"),
        ("multiline = 'yes'\n", "format[0].multiline"),
    ],
)
def test_a_setting_of_the_wrong_type_is_named(tmp_path, extra, path):
    user = tmp_path / "mine.toml"
    user.write_text(GOOD + extra)
    with pytest.raises(InputError) as err:
        load_catalogue([user])
    msg = str(err.value)
    assert msg.startswith(f"{user}: {path}") and "\n" not in msg, msg


@pytest.mark.parametrize(
    "text",
    [
        "format = 1\n",
        "format = [1]\n",
        "[[format]]\nname = 'a'\nregex = 1\n",
        "[prefix]\nregex = '^x'\ntags = 1\n",
        "prefix = 'x'\n",
    ],
)
def test_a_document_of_the_wrong_shape_is_one_line(tmp_path, text):
    user = tmp_path / "mine.toml"
    user.write_text(text)
    with pytest.raises(InputError) as err:
        load_catalogue([user])
    assert str(err.value).startswith(str(user)) and "\n" not in str(err.value)


def test_a_well_shaped_file_still_loads(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text(GOOD + "fields = { n = 'int' }\n")
    assert any(f.name == "mine" for f in load_catalogue([user]).formats)
