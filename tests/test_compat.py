import pytest

from chatsieve.compat import parse_thinking_output


@pytest.mark.parametrize(
    ("text", "thinking", "answer"),
    [
        ("<|channel>thought\nLet me add.<channel|>4<turn|>", "Let me add.", "4"),
        ("<|channel>thought\nA<channel|>B<channel|>C", "A", "B<channel|>C"),
        ("thought\nJust the answer.<eos>", None, "Just the answer."),
        ("  plain answer  <turn|><eos>", None, "plain answer"),
        ("<|channel>thoughtful<channel|> x ", "thoughtful", "x"),
        ("", None, ""),
    ],
)
def test_parse_thinking_output(text, thinking, answer):
    assert parse_thinking_output(text) == {"thinking": thinking, "answer": answer}
