"""Tool-call parsers: whole outputs, streamed outputs cut every way, prompts and detection."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest

from pagoda.tools import (
    TOOL_PARSERS,
    ExtractedToolCalls,
    FunctionTool,
    ToolCall,
    detect_tool_parser,
    tool_parser,
)
from pagoda.tools.json_scan import JsonValueScanner


def calls(*pairs: tuple[str, str]) -> list[ToolCall]:
    return [ToolCall(name, arguments) for name, arguments in pairs]


# (format, model output, expected content, expected calls as (name, arguments text))
WELL_FORMED = [
    # Hermes / Qwen
    ("hermes", "The capital of France is Paris.", "The capital of France is Paris.", []),
    ("hermes", "", None, []),
    ("hermes", "Use a <b>bold</b> tag, or < and <tool.", "Use a <b>bold</b> tag, or < and <tool.", []),
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n'
        "</tool_call>",
        None,
        [("get_weather", '{"city": "Paris", "unit": "c"}')],
    ),
    (
        "hermes",
        "Let me look that up.\n\n<tool_call>\n"
        '{"name": "search", "arguments": {"query": "pagoda height"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>',
        "Let me look that up.",
        [("search", '{"query": "pagoda height"}'), ("get_time", '{"tz": "Asia/Tokyo"}')],
    ),
    (  # cut by max_tokens inside the last end marker: the calls are whole all the same
        "hermes",
        '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call',
        None,
        [("a", "{}"), ("b", '{"x": 1}')],
    ),
    (
        "hermes",
        '<tool_call>{"arguments": {"a": 1, "b": [2, 3]}, "name": "add"}</tool_call>',
        None,
        [("add", '{"a": 1, "b": [2, 3]}')],
    ),
    (
        "hermes",
        '<tool_call>{"name": "echo", "arguments": {"text": "a } and </tool_call> and \\"q\\" '
        '\\\\ end"}}</tool_call>',
        None,
        [("echo", '{"text": "a } and </tool_call> and \\"q\\" \\\\ end"}')],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "translate", "arguments": {"text": "日本の塔 🏯", "to": "fr", '
        '"esc": "\\u00e9"}}\n</tool_call>',
        None,
        [("translate", '{"text": "日本の塔 🏯", "to": "fr", "esc": "\\u00e9"}')],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "create", "arguments": "{\\"title\\": \\"x\\", \\"n\\": 2}"}\n'
        "</tool_call>",
        None,
        [("create", '{"title": "x", "n": 2}')],
    ),
    (
        "hermes",
        '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "now"}</tool_call>'
        '<tool_call>{"name": "ping", "arguments": null}</tool_call>',
        None,
        [("list_files", "{}"), ("now", "{}"), ("ping", "{}")],
    ),
    (
        "hermes",
        'Checking.<tool_call>\n{"name": "nested", "id": 7, "extra": [true, null, -1.5e3], '
        '"arguments": {"deep": {"list": [{"k": "v"}, [], {}], "n": -0.5}}}\n</tool_call>\nDone?',
        "Checking.\nDone?",
        [("nested", '{"deep": {"list": [{"k": "v"}, [], {}], "n": -0.5}}')],
    ),
    (  # the end marker may be missing at the very end of the output
        "hermes",
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n',
        None,
        [("f", '{"x": 1}')],
    ),
    # Llama 3 JSON
    ("llama3_json", "Paris is the capital of France.", "Paris is the capital of France.", []),
    ("llama3_json", "  ", None, []),
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"location": "San Francisco, CA"}}',
        None,
        [("get_weather", '{"location": "San Francisco, CA"}')],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "search", "parameters": {"q": "a;b {c}"}}; '
        '{"name": "get_time", "arguments": {"tz": "UTC"}}',
        None,
        [("search", '{"q": "a;b {c}"}'), ("get_time", '{"tz": "UTC"}')],
    ),
    (
        "llama3_json",
        '\n\n{"parameters": {"amount": 12.5, "tags": ["x", "ü"]}, "name": "pay"};\n'
        '{"name": "noop", "parameters": {}}',
        None,
        [("pay", '{"amount": 12.5, "tags": ["x", "ü"]}'), ("noop", "{}")],
    ),
    ("llama3_json", "Use <|python_tag|> to call.", "Use <|python_tag|> to call.", []),
    # Mistral
    ("mistral", "Bonjour ! Comment puis-je aider ?", "Bonjour ! Comment puis-je aider ?", []),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon"}}]',
        None,
        [("get_weather", '{"city": "Lyon"}')],
    ),
    (
        "mistral",
        'I will check both. [TOOL_CALLS] [{"name": "a", "arguments": {"x": "]"}}, '
        '{"name": "b", "arguments": {"y": [1, [2]]}, "id": "abcdef123"}]',
        "I will check both.",
        [("a", '{"x": "]"}'), ("b", '{"y": [1, [2]]}')],
    ),
    (
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}',
        None,
        [("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')],
    ),
    (
        "mistral",
        'Sure.[TOOL_CALLS]write_file[ARGS]{"path": "a.txt", "text": "[ARGS] } \\" ✓"}',
        "Sure.",
        [("write_file", '{"path": "a.txt", "text": "[ARGS] } \\" ✓"}')],
    ),
    ("mistral", "[TOOL_CALLS][]", None, []),
]

# Outputs whose call text is malformed: extract gives the whole output as content.
MALFORMED = [
    ("hermes", '<tool_call>\n{"name": "get_wea'),
    ("hermes", "Hmm <tool_call>not json</tool_call>"),
    ("hermes", '<tool_call>{"name": 3, "arguments": {}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "", "arguments": {}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>'),
    ("hermes", '<tool_call>{"arguments": {"a": 1}, "nam'),
    ("hermes", '<tool_call>{"arguments": {"a": 1}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "argu'),
    ("hermes", '<tool_call>{"name": "f", "name": "g", "arguments": {}}</tool_call>'),
    ("llama3_json", '{"name": "get_weather", "parameters": '),
    ("llama3_json", '{"name": true, "parameters": {}}'),
    ("llama3_json", '{"answer": 42}'),
    ("llama3_json", "<|python_tag|>brave_search.call(query=\"pagoda\")"),
    ("llama3_json", "<|python_tag|>"),
    ("mistral", "Let me see [TOOL_CALLS]"),
    ("mistral", '[TOOL_CALLS][{"name": "f", "argum'),
    ("mistral", '[TOOL_CALLS][{"name": null, "arguments": {}}]'),
    ("mistral", "[TOOL_CALLS]bad name[ARGS]{}"),
    ("mistral", '[TOOL_CALLS]get_weath'),
    ("mistral", '[TOOL_CALLS]f[ARGS]"x"'),
]

# Malformed only after a call was streamed: the stream keeps what it sent of the call.
BROKEN_AFTER_STREAMING = [
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": [1, 2', "f", '{"a": [1, 2', ""),
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>', "f",
     '{"a": 1,}', "}</tool_call>"),
    ("llama3_json", '{"name": "f", "parameters": {"q": "x"}} trailing words', "f", '{"q": "x"}',
     "trailing words"),
    ("mistral", '[TOOL_CALLS]f[ARGS]{"a": "unfinished', "f", '{"a": "unfinished', ""),
    # a later call breaks before it is streamed: its text comes as content
    ("hermes", '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n<tool_call>oops', "f", "{}",
     "<tool_call>oops"),
]


def run_stream(parser_name: str, pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """Feeds `pieces`; returns the concatenated content and each call's name and arguments."""
    stream = tool_parser(parser_name).stream()
    content = ""
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for i, piece in enumerate(pieces):
        delta = stream.feed(piece, final=i == len(pieces) - 1)
        content += delta.content
        for call in delta.tool_calls:
            if call.name is not None:
                assert call.index not in names, "a call's name comes once"
                assert call.index == len(names), "calls are numbered in order"
                names[call.index] = call.name
            assert call.index in names, "a call's first delta names it"
            arguments[call.index] = arguments.get(call.index, "") + call.arguments
    return content, [(names[i], arguments.get(i, "")) for i in range(len(names))]


def cuttings(text: str, seed: int) -> list[list[str]]:
    """Every single cut, one-character pieces, and random multi-cuts."""
    out = [[text[:i], text[i:]] for i in range(len(text) + 1)]
    out.append(list(text) or [""])
    rng = random.Random(seed)
    for _ in range(12):
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(2, 8))))
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    return out


@pytest.mark.parametrize(("fmt", "text", "content", "expected"), WELL_FORMED)
def test_extract_well_formed(fmt, text, content, expected):
    result = tool_parser(fmt).extract(text)
    assert result == ExtractedToolCalls(content, calls(*expected))
    for call in result.calls:
        assert isinstance(json.loads(call.arguments), dict)


@pytest.mark.parametrize(("fmt", "text"), MALFORMED)
def test_extract_malformed_is_content(fmt, text):
    assert tool_parser(fmt).extract(text) == ExtractedToolCalls(text.strip(), [])


@pytest.mark.parametrize(
    ("fmt", "text"), [(fmt, text) for fmt, text, *_ in WELL_FORMED] + MALFORMED
)
def test_stream_equals_extract_however_cut(fmt, text):
    expected = tool_parser(fmt).extract(text)
    expected_calls = [(call.name, call.arguments) for call in expected.calls]
    for pieces in cuttings(text, seed=len(text)):
        content, streamed = run_stream(fmt, pieces)
        assert content == (expected.content or ""), pieces
        assert streamed == expected_calls, pieces
        assert [json.loads(a) for _, a in streamed] == [json.loads(a) for _, a in expected_calls]


@pytest.mark.parametrize(("fmt", "text", "name", "arguments", "content"), BROKEN_AFTER_STREAMING)
def test_stream_keeps_a_call_it_sent_when_the_output_breaks(fmt, text, name, arguments, content):
    assert tool_parser(fmt).extract(text) == ExtractedToolCalls(text.strip(), [])
    for pieces in cuttings(text, seed=1):
        assert run_stream(fmt, pieces) == (content, [(name, arguments)]), pieces


@pytest.mark.parametrize(
    ("fmt", "prefix", "suffix"),
    [
        ("hermes", 'Sure.\n<tool_call>\n{"name": "write", "arguments": ', "}\n</tool_call>"),
        ("llama3_json", '{"name": "write", "parameters": ', "}"),
        ("mistral", "[TOOL_CALLS]write[ARGS]", ""),
    ],
)
def test_arguments_stream_as_they_are_generated(fmt, prefix, suffix):
    arguments = json.dumps({"text": "word " * 20, "n": [1, {"k": "}"}]}, ensure_ascii=False)
    text = prefix + arguments + suffix
    stream = tool_parser(fmt).stream()
    sent = ""
    for i, c in enumerate(text):
        delta = stream.feed(c)
        if i < len(prefix):
            assert delta.tool_calls == []
            continue
        if i == len(prefix):  # named at the arguments' first character
            assert [call.name for call in delta.tool_calls] == ["write"]
        sent += "".join(call.arguments for call in delta.tool_calls)
        # all of the arguments written so far is sent: the scanner knows where they end
        assert sent == arguments[: i + 1 - len(prefix)]
    assert stream.feed("", final=True).tool_calls == []


def test_arguments_prefix_is_sent_before_the_end():
    parser = tool_parser("hermes")
    stream = parser.stream()
    first = stream.feed('<tool_call>\n{"name": "f", "arguments": {"city": "Pa')
    assert [(d.index, d.name, d.arguments) for d in first.tool_calls] == [(0, "f", '{"city": "Pa')]
    second = stream.feed('ris"}}\n</tool_')
    assert [(d.index, d.name, d.arguments) for d in second.tool_calls] == [(0, None, 'ris"}')]
    last = stream.feed("call>", final=True)
    assert last.content == "" and last.tool_calls == []


def test_plain_text_is_held_only_while_it_may_start_a_marker():
    stream = tool_parser("hermes").stream()
    assert stream.feed("Hello <b").content == "Hello <b"
    # "<tool_" may start a marker; the space before it is held until text follows it
    assert stream.feed("> and <tool_").content == "> and"
    assert stream.feed("tip>").content == " <tool_tip>"
    assert stream.feed("  ", final=True).content == ""  # output's surrounding whitespace


def test_a_call_is_held_until_named_and_its_arguments_begin():
    stream = tool_parser("hermes").stream()
    assert stream.feed('<tool_call>{"arguments": {"a": 1}').tool_calls == []
    delta = stream.feed(', "name": "f"}</tool_call>', final=True)
    assert [(d.name, d.arguments) for d in delta.tool_calls] == [("f", '{"a": 1}')]


def test_feeding_after_the_final_feed_is_an_error():
    stream = tool_parser("hermes").stream()
    stream.feed("done", final=True)
    with pytest.raises(ValueError, match="final"):
        stream.feed("more")


ROUND_TRIP_CALLS = [
    ToolCall("get_weather", '{"city": "Paris"}', "abcDEF123"),
    ToolCall("write", '{"text": "} </tool_call> [ARGS] \\"q\\" 日本 🏯", "n": [1, {"x": null}]}',
             "Zz0Zz0Zz0"),
    ToolCall("noop", "{}"),
]


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_render_calls_round_trip(fmt):
    parser = tool_parser(fmt)
    rendered = parser.render_calls(ROUND_TRIP_CALLS)
    result = parser.extract(rendered)
    assert result.content is None
    assert [(c.name, c.arguments) for c in result.calls] == [
        (c.name, c.arguments) for c in ROUND_TRIP_CALLS
    ]


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_render_no_calls_is_empty(fmt):
    assert tool_parser(fmt).render_calls([]) == ""


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_render_calls_refuses_arguments_that_are_not_an_object(fmt):
    with pytest.raises(ValueError, match="not a JSON object"):
        tool_parser(fmt).render_calls([ToolCall("f", "[1]")])
    with pytest.raises(ValueError, match="not JSON"):
        tool_parser(fmt).render_calls([ToolCall("f", "{oops")])


TOOLS = [
    FunctionTool("get_weather", "The weather in a city.", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    FunctionTool("now"),
]


@pytest.mark.parametrize("fmt", sorted(TOOL_PARSERS))
def test_tools_system_prompt_lists_the_tools_as_json(fmt):
    prompt = tool_parser(fmt).tools_system_prompt(TOOLS)
    decoder = json.JSONDecoder()
    found = []
    for start in [m.start() for m in re.finditer(r'\{"type": "function"', prompt)]:
        found.append(decoder.raw_decode(prompt, start)[0]["function"])
    assert found == [
        {"name": "get_weather", "description": "The weather in a city.",
         "parameters": TOOLS[0].parameters},
        {"name": "now"},
    ]


def test_render_result():
    call = ToolCall("get_weather", '{"city": "Paris"}', "abcDEF123")
    assert tool_parser("hermes").render_result("22 C", call) == (
        "<tool_response>\n22 C\n</tool_response>"
    )
    assert json.loads(tool_parser("llama3_json").render_result("22 C", call)) == {
        "name": "get_weather", "output": "22 C"}
    mistral = tool_parser("mistral").render_result("22 C", call)
    assert mistral.startswith("[TOOL_RESULTS]") and mistral.endswith("[/TOOL_RESULTS]")
    assert json.loads(mistral[len("[TOOL_RESULTS]") : -len("[/TOOL_RESULTS]")]) == {
        "content": "22 C", "call_id": "abcDEF123"}


def test_call_ids():
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", tool_parser("hermes").new_call_id())
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", tool_parser("llama3_json").new_call_id())
    ids = {tool_parser("mistral").new_call_id() for _ in range(20)}
    assert len(ids) == 20 and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)


def test_tool_parser_names_the_choices():
    assert sorted(TOOL_PARSERS) == ["hermes", "llama3_json", "mistral"]
    for name, cls in TOOL_PARSERS.items():
        assert cls.name == cls.grammar_format == name
    with pytest.raises(ValueError, match="hermes.*llama3_json.*mistral"):
        tool_parser("qwen_xml")


QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\n\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- endif %}"""

LLAMA31_TEMPLATE = """{%- if tools_in_user_message and not tools is none %}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{%- endif %}
{%- if builtin_tools is defined and tool_call.name in builtin_tools %}
    {{- '<|python_tag|>' + tool_call.name + '.call(' }}
{%- endif %}"""

LLAMA32_TEMPLATE = """{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}' }}"""

MISTRAL_TEMPLATE = """{%- elif message.tool_calls is defined and message.tool_calls is not none %}
    {{- "[TOOL_CALLS][" }}
    {%- for tool_call in message.tool_calls %}
        {{- '{"name": "' + tool_call.function.name + '", "arguments": ' + tool_call.function.arguments|tojson }}
    {%- endfor %}
{%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
    {{- '[TOOL_RESULTS]{"content": ' + message.content|string + "}[/TOOL_RESULTS]" }}"""

PLAIN_TEMPLATE = """{% for message in messages %}<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}"""


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN25_TEMPLATE, "hermes"),
        (LLAMA31_TEMPLATE, "llama3_json"),
        (LLAMA32_TEMPLATE, "llama3_json"),
        (MISTRAL_TEMPLATE, "mistral"),
        (PLAIN_TEMPLATE, None),
        ("", None),
        (None, None),
    ],
)
def test_detect_tool_parser(template, expected):
    assert detect_tool_parser(template) == expected


def test_the_package_imports_neither_torch_nor_transformers():
    code = (
        "import sys, pagoda.tools\n"
        "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("text", "end", "error"),
    [
        ('{"a": "}", "b": [1, {"c": "\\"]"}]} tail', 34, False),
        ('"a \\" b" tail', 8, False),
        ("[[], {}] x", 8, False),
        ("-12.5e3, x", 7, False),  # a number ends before the delimiter
        ("{] x", 1, True),
        ("{'a': 1}", 1, True),
        ('{"a": [1, 2', 11, False),  # not ended yet
    ],
)
def test_json_value_scanner(text, end, error):
    for pieces in cuttings(text, seed=0):
        scanner = JsonValueScanner()
        seen = ""
        pos = 0
        for piece in pieces:
            seen += piece
            pos = scanner.scan(seen, pos)
            if scanner.done or scanner.error:
                break
        assert (pos, scanner.error) == (end, error), pieces
        assert scanner.done == (not error and end < len(text))


@pytest.mark.parametrize(
    ("fmt", "text"), [(fmt, text) for fmt, text, _, expected in WELL_FORMED if expected]
)
def test_every_truncation_streams_alike_however_cut(fmt, text):
    """An output cut off anywhere (max_tokens) never raises; the stream's result does not
    depend on how the output was fed; and it equals extract's unless a call was streamed
    before the break."""
    parser = tool_parser(fmt)
    rng = random.Random(7)
    for end in range(len(text) + 1):
        truncated = text[:end]
        expected = parser.extract(truncated)
        whole = run_stream(fmt, [truncated])
        if expected.calls or not whole[1]:
            assert whole == (expected.content or "", [(c.name, c.arguments) for c in expected.calls])
        cuts = [list(truncated) or [""]]
        for _ in range(3):
            points = sorted(rng.sample(range(end + 1), min(end + 1, 3)))
            cuts.append([truncated[a:b] for a, b in zip([0, *points], [*points, end])])
        for pieces in cuts:
            assert run_stream(fmt, pieces) == whole, pieces
