import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalesim.errors import ScheduleError
from stalesim.schedule import Action, Kind

actions = st.builds(
    Action,
    kind=st.sampled_from(list(Kind)),
    stage=st.integers(0, 99),
    batch=st.integers(0, 9999),
    micro=st.none() | st.integers(0, 99),
    worker=st.integers(0, 9),
    version=st.none() | st.integers(0, 9999),
)


@given(actions)
def test_text_form_round_trips(a):
    assert Action.parse(str(a)) == a


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1F3", Action(Kind.F, 1, 3)),
        ("0B3.2v1", Action(Kind.B, 0, 3, 2, 0, 1)),
        ("w2:0AR5", Action(Kind.AR, 0, 5, None, 2)),
        ("0ARW5", Action(Kind.ARW, 0, 5)),
        ("2SEND_F7.1", Action(Kind.SEND_F, 2, 7, 1)),
        ("3LOSS0", Action(Kind.LOSS, 3, 0)),
    ],
)
def test_parse_examples(text, expected):
    assert Action.parse(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("bad", ["", "F3", "1X3", "1F", "1F3.", "w:1F3", "1F3v"])
def test_parse_rejects_with_the_text_named(bad):
    with pytest.raises(ScheduleError, match="cannot parse action"):
        Action.parse(bad)


def test_key_ignores_version():
    a = Action(Kind.F, 1, 3, None, 0, 5)
    assert a.key == a.with_version(None).key
    assert a != a.with_version(None)
