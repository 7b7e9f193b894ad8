"""The call ids chatsieve makes: OpenAI's shape (`call_` + 24 alphanumerics) and Mistral's (9),
every character of the 62 at every position."""

from __future__ import annotations

import re

import pytest

from chatsieve.args.base import openai_call_id, random_alnum
from chatsieve.args.mistral import mistral_call_id


@pytest.mark.parametrize(("make", "shape"), [(openai_call_id, r"call_[A-Za-z0-9]{24}"),
                                             (mistral_call_id, r"[A-Za-z0-9]{9}")])
def test_ids_have_the_shape_and_do_not_repeat(make, shape):
    ids = [make() for _ in range(2000)]
    assert all(re.fullmatch(shape, i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_every_character_comes_at_every_position():
    # 5,000 draws: each character is expected 80 times at each position (missing one by chance:
    # about 62 * 12 * e**-80)
    draws = [random_alnum(12) for _ in range(5000)]
    for position in range(12):
        assert len({d[position] for d in draws}) == 62, position
