"""quick_init: a frozen, slotted dataclass built through its slots behaves as the dataclass did."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from peloton.host.driver import LaunchRequest, TaskUpdate
from peloton.model.quick_init import quick_init
from peloton.model.resources import Resources
from stages.place.placement import Assignment


@quick_init
@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    count: int = 3
    tags: list = field(default_factory=list)


@quick_init
@dataclass(frozen=True, slots=True)
class Checked:
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


def test_a_quick_init_record_is_the_dataclass_it_was() -> None:
    s = Sample("a")
    assert (s.name, s.count, s.tags) == ("a", 3, []) and Sample("a", count=5).count == 5
    assert Sample("a").tags is not s.tags  # a factory's default is made for each
    assert s == Sample("a") and hash(Sample("a", tags=None)) == hash(Sample("a", tags=None))
    assert dataclasses.replace(s, count=9) == Sample("a", 9) and pickle.loads(pickle.dumps(s)) == s
    assert repr(s) == "Sample(name='a', count=3, tags=[])"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.name = "b"
    with pytest.raises(TypeError):
        Sample()  # a field without a default is still required
    with pytest.raises(TypeError):
        Sample("a", nope=1)
    with pytest.raises(ValueError, match="low above high"):  # __post_init__ still runs
        Checked(2, 1)


def test_quick_init_refuses_what_it_would_get_wrong() -> None:
    @dataclass(slots=True)
    class Loose:
        a: int

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = field(kw_only=True)

    for cls in (Loose, KeywordOnly):
        with pytest.raises(TypeError):
            quick_init(cls)


@pytest.mark.parametrize("cls", [Resources, LaunchRequest, TaskUpdate, Assignment])
def test_the_records_made_per_task_use_it(cls: type) -> None:
    assert cls.__init__.__code__.co_filename.startswith("<quick_init")
