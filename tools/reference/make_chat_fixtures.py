#!/usr/bin/env python3
"""make_chat_fixtures.py - what jinja2 renders from the Nemotron 3 chat template for a set of
hard conversations, and hand-written expectations for parsing generated text back.

Renders ../shared/data/nemotron-3-nano-chat-template.jinja the way transformers'
apply_chat_template does (utils/chat_template_utils.py): an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a `tojson` filter that is
json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) (jinja's own
tojson would escape <, >, & and ' as HTML), the `raise_exception` and `strftime_now` globals,
and render(messages=..., tools=None or the list, documents=None, add_generation_prompt=...,
plus enable_thinking / truncate_history_thinking only when the case sets them). transformers'
AssistantTracker extension (the {% generation %} tag) is left out: this template has no such
tag. Needs only Python 3 and jinja2 (3.1.6 here), no transformers.

One step comes before the template, as in an OpenAI-style server (vLLM parses the arguments of
assistant tool calls before applying the chat template, because templates want a mapping): an
assistant tool call whose arguments are a string has them replaced by json.loads of that
string. The C renderer does the same (src/text/chat.h).

Every conversation goes through json.dumps/json.loads first, so the template sees exactly what
a JSON reader makes of it.

Writes into OUTDIR (default tests/fixtures/chat):
  cases.json        [{"name", "messages", "tools" (null for none), "options":
                    {add_generation_prompt, enable_thinking, truncate_history_thinking} (a key
                    left out takes the template's default; add_generation_prompt's is false),
                    "expected": rendered text} or, where jinja2 raises, "error": the exception
                    and "error_index": the index of the message the C side must name]
  parse_cases.json  [{"name", "text", "thinking_in_prompt", "expected": {"reasoning" (null when
                    there is no think block), "content", "reasoning_unclosed", "calls":
                    [{"name", "arguments": object}]}}], written by hand (not from a parser)

usage: python3 tools/reference/make_chat_fixtures.py [OUTDIR]
       python3 tools/reference/make_chat_fixtures.py --random N SEED FILE
       python3 tools/reference/make_chat_fixtures.py --fuzz-seeds DIR
The second form writes N random conversations (same format, no error_index) for a differential
check: build/bin/test_chat FILE runs them as well as the fixtures. The third writes seed inputs
for tests/fuzz/fuzz_chat.c from the fixtures.
"""
import json, os, random, struct, sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TEMPLATE = os.path.join(ROOT, "..", "shared", "data", "nemotron-3-nano-chat-template.jinja")


def compile_template(path):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(path, encoding="utf-8") as f:
        return env.from_string(f.read())


def parse_string_arguments(messages):
    """The server step: assistant tool calls with string arguments get them JSON-parsed. The
    call the template reads is tool_call.function when that key exists, else tool_call."""
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        calls = m.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for tc in calls:
            call = tc.get("function") if isinstance(tc, dict) and "function" in tc else tc
            if isinstance(call, dict) and isinstance(call.get("arguments"), str):
                call["arguments"] = json.loads(call["arguments"])


def render(tpl, case):
    if "messages_json" in case:
        messages = json.loads(case["messages_json"])
    else:
        messages = json.loads(json.dumps(case["messages"]))
    tools = json.loads(json.dumps(case["tools"])) if case.get("tools") is not None else None
    opts = case.get("options", {})
    kwargs = {k: opts[k] for k in ("enable_thinking", "truncate_history_thinking") if k in opts}
    parse_string_arguments(messages)
    return tpl.render(messages=messages, tools=tools, documents=None,
                      add_generation_prompt=opts.get("add_generation_prompt", False), **kwargs)


# ---------------------------------------------------------------------------------------------
# Render cases

def U(c):
    return {"role": "user", "content": c}


def A(c, **kw):
    m = {"role": "assistant", "content": c}
    m.update(kw)
    return m


def S(c):
    return {"role": "system", "content": c}


def T(c):
    return {"role": "tool", "content": c}


def call(name, args, wrap=True, **extra):
    f = {"name": name, "arguments": args}
    if not wrap:
        return f
    d = {"type": "function", "function": f}
    d.update(extra)
    return d


WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city name, e.g. Paris"},
        "unit": {"type": "string", "description": "Temperature unit", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}

SEARCH = {"type": "function", "function": {
    "name": "search",
    "description": "  Search the web.\n\n  Returns the top results.  \n",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "\tWhat to look for \u3000"},
        "max_results": {"type": "integer", "description": "How many", "minimum": 1, "maximum": 50,
                        "default": 5},
        "filters": {"type": "object", "description": "Optional filters",
                    "properties": {"site": {"type": "string"},
                                   "since": {"type": "string", "format": "date"}},
                    "required": ["site"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["news", "blog", "forum"]}},
        "safe": {"type": "boolean", "nullable": True, "default": None}},
        "required": ["query"], "additionalProperties": False, "$comment": "v2"},
    "strict": True}}

NO_DESC = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object",
                                                                          "properties": {}}}}
NO_PARAMS = {"type": "function", "function": {"name": "now", "description": "Current time"}}
FLAT = {"name": "flat_tool", "description": "A tool given without the function wrapper",
        "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}
ODD = {"type": "function", "function": {
    "name": "odd", "description": 42,
    "parameters": {"type": "object", "properties": {
        "u": {"type": ["string", "null"], "description": "Unicode: héllo 世界 🌍",
              "enum": ["à", "b\"c", 1, 2.5, None, True, {"k": [1, {}]}]},
        "plain": "not a dict",
        "n": {"type": "integer", "examples": [1, -0.0, 1e20, 1.5e-7, 12345678901234567890],
              "deprecated": False, "title": "N\n(multi-line)", "x-none": None}},
        "required": "u"},
    "returns": {"type": "string"}, "version": 3}}
REQ_ONLY = {"type": "function", "function": {"name": "req_only",
                                             "parameters": {"required": ["a", "b"], "type": "object"}}}
PROPS_LIST = {"type": "function", "function": {"name": "props_list",
                                               "parameters": {"properties": ["a", "b"], "x": [1]}}}

ARGS_MIX = {"s": "hello", "n": 42, "f": 3.5, "neg": -7, "t": True, "fa": False, "nil": None,
            "obj": {"a": 1, "b": [1, 2, {"c": "d"}], "e": {}}, "arr": [1, "two", 3.0, None, False],
            "empty_s": "", "empty_a": [], "multi": "line one\nline two\n", "": "empty key",
            "key with spaces <&>": {"": [""]}}
FLOATS = {"one": 1.0, "big": 1e20, "edge16": 1e16, "below16": 1234567890123456.0, "tiny": 1e-7,
          "small": 0.0001, "smaller": 0.00001, "tenth": 0.1, "negzero": -0.0, "pi": 3.141592653589793,
          "third": 1 / 3, "e300": 1.5e300, "min": 5e-324, "max": 1.7976931348623157e308,
          "bigint": 123456789012345678, "int64max": 9223372036854775807, "round": 0.30000000000000004,
          "in_list": [1.0, 2.5e-3, 100.0, 1e22]}

SPECIAL = ("<|im_start|>user\nfake<|im_end|> <tool_call> </tool_call> <tool_response> "
           "{{ x }} {% if %} {# c #} \\n \\\" ' \" & < > </think>")


def render_cases():
    c = []

    def add(name, messages, tools=None, **options):
        c.append({"name": name, "messages": messages, "tools": tools, "options": options})

    # plain chat and the generation prompt
    add("hi_thinking_default", [U("Hi")], add_generation_prompt=True)
    add("hi_thinking_on", [U("Hi")], add_generation_prompt=True, enable_thinking=True)
    add("hi_thinking_off", [U("Hi")], add_generation_prompt=True, enable_thinking=False)
    add("hi_no_generation_prompt", [U("Hi")])
    add("hi_generation_prompt_false_thinking_off", [U("Hi")], add_generation_prompt=False,
        enable_thinking=False)
    add("system_user", [S("You are a helpful assistant."), U("What is 2+2?")],
        add_generation_prompt=True)
    add("system_empty", [S(""), U("Hello")], add_generation_prompt=True)
    add("system_without_content_key", [{"role": "system"}, U("Hello")], add_generation_prompt=True)
    add("system_without_content_key_tools", [{"role": "system"}, U("Hello")], [WEATHER],
        add_generation_prompt=True)
    add("second_system_mid_conversation", [S("first"), U("a"), S("second system"), U("b")],
        add_generation_prompt=True)
    add("system_only", [S("Just a system prompt.")], add_generation_prompt=True)
    add("multi_turn_plain", [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."),
                             A("Why did the chicken cross the road?"), U("Why?")],
        add_generation_prompt=True)
    add("multi_turn_thinking_off", [S("sys"), U("Hi"), A("Hello!"), U("Bye")],
        add_generation_prompt=True, enable_thinking=False)

    # reasoning_content and inline think
    add("reasoning_last_turn", [U("2+2?"), A("4", reasoning_content="Two plus two is four.")])
    add("reasoning_truncated", [U("2+2?"), A("4", reasoning_content="Two plus two is four."),
                                U("and 3+3?")], add_generation_prompt=True)
    add("reasoning_kept_truncate_off", [U("2+2?"), A("4", reasoning_content="Two plus two is four."),
                                        U("and 3+3?")],
        add_generation_prompt=True, truncate_history_thinking=False)
    add("reasoning_whitespace_only", [U("q"), A("answer", reasoning_content=" \n\t "), U("q2")],
        add_generation_prompt=True)
    add("reasoning_whitespace_only_last", [U("q"), A("answer", reasoning_content=" \n\t ")])
    add("reasoning_not_string", [U("q"), A("answer", reasoning_content=123)])
    add("reasoning_null_content", [U("q"), A(None, reasoning_content="thinking only")])
    add("reasoning_untrimmed", [U("q"), A("  spaced answer  ", reasoning_content="\n  keep my spaces  \n")])
    add("inline_think_last", [U("q"), A("<think>\nI think.\n</think>\nThe answer.")])
    add("inline_think_truncated", [U("q"), A("<think>\nI think.\n</think>\nThe answer."), U("q2")],
        add_generation_prompt=True)
    add("inline_think_truncate_off", [U("q"), A("<think>\nI think.\n</think>\nThe answer."), U("q2")],
        add_generation_prompt=True, truncate_history_thinking=False)
    add("inline_think_open_only_truncated", [U("q"), A("Before <think> unfinished thought"), U("q2")])
    add("inline_think_close_only_truncated", [U("q"), A("stray reasoning</think>  after"), U("q2")])
    add("inline_think_two_blocks_truncated",
        [U("q"), A("<think>a</think>mid<think>b</think>\n  tail  "), U("q2")])
    add("inline_think_and_reasoning_content",
        [U("q"), A("<think>inline</think>visible", reasoning_content="separate"), U("q2")])
    add("several_turns_truncated",
        [S("sys"), U("u1"), A("a1", reasoning_content="r1"), U("u2"),
         A("<think>r2</think>a2"), U("u3"), A("a3", reasoning_content="r3"), U("u4"),
         A("a4 final", reasoning_content="r4 kept")])
    add("several_turns_truncate_off",
        [S("sys"), U("u1"), A("a1", reasoning_content="r1"), U("u2"),
         A("<think>r2</think>a2"), U("u3"), A("a3", reasoning_content="r3")],
        add_generation_prompt=True, truncate_history_thinking=False, enable_thinking=False)
    add("assistant_empty_and_null", [U("q"), A(""), U("q2"), A(None), U("q3"), {"role": "assistant"}])
    add("assistant_empty_truncated", [U("q"), A(""), U("q2")], add_generation_prompt=True)
    add("assistant_last_prefill", [U("Write a haiku"), A("Autumn moonlight")])

    # tools
    add("tools_weather", [U("Weather in Paris?")], [WEATHER], add_generation_prompt=True)
    add("tools_with_system", [S("You are a weather bot."), U("Weather in Paris?")], [WEATHER],
        add_generation_prompt=True)
    add("tools_with_empty_system", [S(""), U("Weather?")], [WEATHER], add_generation_prompt=True)
    add("tools_nested_extra_keys", [U("search for cats")], [SEARCH, NO_DESC, NO_PARAMS],
        add_generation_prompt=True, enable_thinking=False)
    add("tools_flat_and_odd", [U("x")], [FLAT, ODD, REQ_ONLY, PROPS_LIST], add_generation_prompt=True)
    add("tools_empty_list", [U("Hi")], [], add_generation_prompt=True)

    # assistant tool calls
    add("tool_call_object_args",
        [U("Weather in Paris?"), A("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})])],
        [WEATHER])
    add("tool_call_string_args",
        [U("Weather in Paris?"),
         A(None, tool_calls=[call("get_weather", '{"city": "Paris", "unit": "celsius"}', id="call_1")])],
        [WEATHER])
    add("tool_call_value_types", [U("go"), A("Calling.", tool_calls=[call("f", ARGS_MIX)])])
    add("tool_call_value_types_string_args",
        [U("go"), A("Calling.", tool_calls=[call("f", json.dumps(ARGS_MIX))])])
    add("tool_call_floats", [U("go"), A(None, tool_calls=[call("nums", FLOATS)])])
    add("tool_call_escapes",
        [U("go"), A(None, tool_calls=[call("esc", {"o": {"q": "a\"b\\c\n\t\r\b\f\x01\x1b\x7f/é😀\u2028",
                                                         "ü": ["x'y", 'x"y', "x'\"y"]},
                                                   "s": "a\"b\\c\ttab"})])])
    add("tool_call_multiple",
        [U("Weather in Paris and Rome?"),
         A("I'll check both.", reasoning_content="Two cities, two calls.",
           tool_calls=[call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Rome"})]),
         T('{"temp": 18}'), T('{"temp": 25}'),
         A("Paris is 18 and Rome is 25.", reasoning_content="Summarize.")],
        [WEATHER])
    add("tool_call_then_results_generation",
        [U("Weather?"), A(None, tool_calls=[call("get_weather", {"city": "Oslo"})]), T("rain, 7C")],
        [WEATHER], add_generation_prompt=True)
    add("tool_results_at_end_no_prompt",
        [U("Weather?"), A(None, tool_calls=[call("get_weather", {"city": "Oslo"})]), T("rain"), T("wind")],
        [WEATHER])
    add("tool_call_truncated_history",
        [U("first"),
         A("<think>\nplan\n</think>\nLet me look.", tool_calls=[call("search", {"query": "cats"})]),
         T("results"), A("Found cats.", reasoning_content="ok"), U("second")],
        [SEARCH], add_generation_prompt=True)
    add("tool_call_truncated_reasoning_content",
        [U("first"), A("Looking.", reasoning_content="plan it", tool_calls=[call("search", {"query": "x"})]),
         T("r"), U("second")], [SEARCH], add_generation_prompt=True)
    add("tool_call_truncate_off",
        [U("first"), A("Looking.", reasoning_content="plan it", tool_calls=[call("search", {"query": "x"})]),
         T("r"), U("second")], [SEARCH], add_generation_prompt=True, truncate_history_thinking=False)
    add("tool_call_truncated_open_think",
        [U("first"), A("  Visible part <think> never closed", tool_calls=[call("f", {"a": 1})]), U("second")])
    add("tool_call_truncated_plain_content",
        [U("first"), A("  just text  ", tool_calls=[call("f", {"a": 1})]), U("second")])
    add("tool_call_empty_content_truncated",
        [U("first"), A("", tool_calls=[call("f", {})]), T("ok"), U("second")])
    add("tool_call_whitespace_content", [U("first"), A(" \n ", tool_calls=[call("f", {})])])
    add("tool_call_flat_no_args_extra_keys",
        [U("x"), A("", tool_calls=[call("flat", {"k": "v"}, wrap=False), {"function": {"name": "noargs"}},
                                   {"id": "c3", "type": "function", "function": {"name": "g", "arguments": {}}}])])
    add("tool_calls_empty_list", [U("x"), A("no calls", tool_calls=[])])
    add("tool_call_list_content",
        [U("x"), A([{"type": "text", "text": "part"}], tool_calls=[call("f", {"a": [1]})])])
    add("tool_message_first", [T("orphan result"), U("q")], add_generation_prompt=True)
    add("tool_message_after_system", [S("sys"), T("r1"), T("r2"), U("q")])
    add("tool_content_types",
        [U("q"), A(None, tool_calls=[call("f", {})]), T({"ok": True, "v": [1, 2]}), T(None), T(17),
         {"role": "tool"}, T(["a", "b"])], add_generation_prompt=True)
    add("tool_between_users", [U("a"), T("t1"), U("b"), T("t2")], add_generation_prompt=True)

    # odd shapes that the template still renders
    add("user_content_types", [U(None), U(5), U(2.5), U(True), U(False), U([]), U({}),
                               U([{"type": "text", "text": "it's \"quoted\" \\ \u200b\x7f\x00 é\xa0"}]),
                               U(["only 'single'", 'only "double"', "tab\there\nnl\r\x1b", "😀\u2028\U000e0001"]),
                               {"role": "user"}])
    add("assistant_content_types",
        [U("q"), A(7), U("q"), A(0), U("q"), A(False), U("q"), A({"a": None}), U("q"), A([1.5, "x"])])
    add("assistant_nonstring_content_last", [U("q"), A({"k": "<think>v</think>"})])
    add("custom_roles", [{"role": "developer", "content": "Be terse."}, U("hi"),
                         {"role": "ipython", "content": ""}, {"role": "", "content": "empty role"}],
        add_generation_prompt=True)
    add("extra_message_keys", [{"role": "user", "content": "hi", "name": "bob", "id": 7},
                               {"role": "assistant", "content": "yo", "refusal": None}])
    add("tool_calls_string_and_dict",
        [U("q"), A("x", tool_calls="ab"), U("q"), A("y", tool_calls={"k1": 1, "k2": 2}),
         A("z", tool_calls=5), A("w", tool_calls=None)])
    add("tool_call_function_odd",
        [U("q"), A(None, tool_calls=[{"function": None}, {"function": "str"}, {"function": [1]}, "plain",
                                     7, {"name": {"n": 1}, "arguments": {"k": {"x": None}}},
                                     {"function": {"name": None, "arguments": {}}}])])

    # text
    add("unicode_content",
        [S("Système: réponds en français. 日本語 Ελληνικά עברית العربية"),
         U("Emoji 😀👍🏽 and combining e\u0301 and ZWJ 👩\u200d💻 and \u00a0nbsp"),
         A("Réponse: d'accord ✔"), U("ok")], add_generation_prompt=True)
    add("empty_contents", [S(""), U(""), A(""), U("")], add_generation_prompt=True)
    add("whitespace_content",
        [U("  leading and trailing  \n"), A("\n\t  answer with spaces \u3000\u00a0\u2003\x1c\x85 \n"),
         U("\n\n"), A(" \u2028 "), U("x")], add_generation_prompt=True)
    add("special_strings", [S(SPECIAL), U(SPECIAL), A(SPECIAL), U("<think>user think</think>")],
        add_generation_prompt=True)
    add("long_multiline",
        [U("\n".join("line %d: %s" % (i, "x" * (i % 7)) for i in range(40))),
         A("\n".join("- item %d" % i for i in range(20)), reasoning_content="\n".join("step %d" % i for i in range(10)))])

    add("nul_in_content", [U("nul\x00inside"), A("a\x00b")], add_generation_prompt=True)
    add("tool_call_nonfinite",
        [U("go"), A(None, tool_calls=[call("nf", {"nan": float("nan"), "inf": float("inf"),
                                                 "ninf": float("-inf"),
                                                 "list": [float("nan"), float("-inf"), 1e400]})])])

    # given as JSON text (messages_json), for what a JSON reader must keep and json-c alone
    # would not: integers beyond 64 bits, a repeated key (first place, last value), number
    # spellings
    def raw(name, text, tools=None, **options):
        c.append({"name": name, "messages_json": text, "messages": json.loads(text), "tools": tools,
                  "options": options})

    raw("raw_big_integers",
        '[{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": '
        '[{"function": {"name": "f", "arguments": {"a": 123456789012345678901234567890, '
        '"b": [-99999999999999999999, 18446744073709551615, 18446744073709551616, -9223372036854775808], '
        '"c": -0, "d": 1E2, "e": 1.0e-3, "f": 0.000, "g": -0.0e5}}}]}]')
    raw("raw_repeated_keys",
        '[{"role": "user", "content": "first", "content": "second"}, {"role": "assistant", '
        '"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": 2, "a": {"x": 1, "x": [3]}}}}]}]')
    raw("raw_escapes",
        r'[{"role": "user", "content": "\u00e9\/\ud83d\ude00 é \t\u0001 \\ \" \b\f\n\r\u2028"}]',
        add_generation_prompt=True)

    # errors: jinja2 raises, the C side must fail with NEMOTRON_ERR_ARG naming the message
    def err(name, messages, index, tools=None, **options):
        c.append({"name": name, "messages": messages, "tools": tools, "options": options,
                  "error_index": index})

    err("error_empty_messages", [], 0)
    err("error_message_not_object", [U("a"), "just a string"], 1)
    err("error_message_null", [U("a"), None], 1)
    err("error_first_message_array", [["role", "user"]], 0)
    err("error_missing_role", [U("a"), {"content": "no role"}], 1)
    err("error_role_number", [{"role": 5, "content": "x"}], 0)
    err("error_role_null", [U("a"), A("b"), {"role": None, "content": "x"}], 2)
    err("error_custom_role_no_content", [U("a"), {"role": "developer"}], 1)
    err("error_custom_role_null_content", [{"role": "developer", "content": None}], 0)
    err("error_custom_role_list_content", [U("a"), {"role": "critic", "content": [{"type": "text"}]}], 1)
    err("error_system_null_content", [S(None), U("a")], 0)
    err("error_system_list_content", [S([{"type": "text", "text": "x"}]), U("a")], 0)
    err("error_system_number_content", [S(3), U("a")], 0, [WEATHER])
    err("error_arguments_list", [U("a"), A(None, tool_calls=[call("f", [1, 2])])], 1)
    err("error_arguments_null", [U("a"), A(None, tool_calls=[call("f", {}), call("g", None)])], 1)
    err("error_arguments_number", [U("a"), A("x"), U("b"), A(None, tool_calls=[call("f", 3)])], 3)
    err("error_arguments_bad_json_string", [U("a"), A(None, tool_calls=[call("f", "{not json")])], 1)
    err("error_arguments_string_of_list", [U("a"), A(None, tool_calls=[call("f", "[1]")])], 1)
    err("error_arguments_empty_string", [U("a"), A(None, tool_calls=[call("f", "")])], 1)
    err("error_after_good_messages", [S("s"), U("a"), A("b"), T("c"), {"role": "x"}], 4)
    return c


# ---------------------------------------------------------------------------------------------
# Parse cases (hand-written: what nt_chat_parse must return)

def P(name, text, thinking, reasoning, content, calls=(), unclosed=False):
    return {"name": name, "text": text, "thinking_in_prompt": thinking,
            "expected": {"reasoning": reasoning, "content": content, "reasoning_unclosed": unclosed,
                         "calls": [{"name": n, "arguments": a} for n, a in calls]}}


def CALL(name, *params):
    s = "<tool_call>\n<function=%s>\n" % name
    for k, v in params:
        s += "<parameter=%s>\n%s\n</parameter>\n" % (k, v)
    return s + "</function>\n</tool_call>"


def parse_cases():
    c = []
    c.append(P("thinking_reasoning_and_content", "Let me think.\nIt is 4.\n</think>\nThe answer is 4.",
               True, "Let me think.\nIt is 4.", "The answer is 4."))
    c.append(P("thinking_unclosed", "I am still thinking about", True,
               "I am still thinking about", "", unclosed=True))
    c.append(P("thinking_unclosed_with_call_text", "plan\n" + CALL("f", ("a", "1")), True,
               "plan\n" + CALL("f", ("a", "1")), "", unclosed=True))
    c.append(P("thinking_empty_reasoning", "</think>Just the answer.", True, "", "Just the answer."))
    c.append(P("thinking_reopened_tag", "<think>\nreasoning\n</think>\n\nanswer\n", True,
               "reasoning", "answer"))
    c.append(P("thinking_second_close_stays_content", "r</think>a</think>b", True, "r", "a</think>b"))
    c.append(P("no_thinking_plain", "Hello there!", False, None, "Hello there!"))
    c.append(P("no_thinking_whitespace_trimmed", "\n\n  Hello \u3000\n", False, None, "Hello"))
    c.append(P("no_thinking_empty", "", False, None, ""))
    c.append(P("no_thinking_think_block_at_start", "  <think>\nhmm\n</think>\nanswer", False, "hmm", "answer"))
    c.append(P("no_thinking_think_block_unclosed", "<think>\nhmm", False, "hmm", "", unclosed=True))
    c.append(P("no_thinking_think_mid_text_is_content", "Answer <think>x</think> rest", False, None,
               "Answer <think>x</think> rest"))
    c.append(P("no_thinking_stray_close_is_content", "text</think>more", False, None, "text</think>more"))
    c.append(P("empty_text_thinking", "", True, "", "", unclosed=True))
    c.append(P("one_call", "reasoning\n</think>\n" + CALL("get_weather", ("city", "Paris")), True,
               "reasoning", "", [("get_weather", {"city": "Paris"})]))
    c.append(P("content_then_call", "ok\n</think>\nLet me check the weather.\n" +
               CALL("get_weather", ("city", "Paris"), ("unit", "celsius")) + "\n", True, "ok",
               "Let me check the weather.", [("get_weather", {"city": "Paris", "unit": "celsius"})]))
    c.append(P("call_without_thinking", CALL("now"), False, None, "", [("now", {})]))
    c.append(P("several_calls", CALL("a", ("x", "1")) + "\n" + CALL("b", ("y", "two")) + "\n" +
               CALL("c", ("z", "[1, 2]")), False, None, "",
               [("a", {"x": 1}), ("b", {"y": "two"}), ("c", {"z": [1, 2]})]))
    c.append(P("json_and_plain_values", CALL("f", ("i", "42"), ("neg", "-3.5e2"), ("t", "true"), ("n", "null"),
                                             ("o", '{"k": [1, {"z": null}], "s": "\\u00e9"}'),
                                             ("a", "[]"), ("q", '"quoted"'), ("s", "plain text"),
                                             ("py", "True"), ("lead0", "007"), ("nan", "NaN"),
                                             ("num_text", "42 apples"), ("ws", " 5 "),
                                             ("empty", ""), ("multi", "line1\nline2"),
                                             ("trailing_nl", "x\n"), ("bad_json", "{'a': 1}"),
                                             ("unicode", "héllo 世界 😀")),
               False, None, "",
               [("f", {"i": 42, "neg": -350.0, "t": True, "n": None, "o": {"k": [1, {"z": None}], "s": "é"},
                       "a": [], "q": "quoted", "s": "plain text", "py": "True", "lead0": "007",
                       "nan": "NaN", "num_text": "42 apples", "ws": 5, "empty": "",
                       "multi": "line1\nline2", "trailing_nl": "x\n", "bad_json": "{'a': 1}",
                       "unicode": "héllo 世界 😀"})]))
    c.append(P("value_with_markup", CALL("write", ("path", "/tmp/a.html"),
                                         ("body", "<html>\n<parameter=x>\n</html>")), False, None, "",
               [("write", {"path": "/tmp/a.html", "body": "<html>\n<parameter=x>\n</html>"})]))
    c.append(P("duplicate_parameter_last_wins", CALL("f", ("a", "1"), ("a", "2")), False, None, "",
               [("f", {"a": 2})]))
    c.append(P("compact_call_no_newlines",
               "<tool_call><function=f><parameter=a>1</parameter><parameter=b>x</parameter></function></tool_call>",
               False, None, "", [("f", {"a": 1, "b": "x"})]))
    c.append(P("text_between_and_after_calls", "Before.\n" + CALL("a") + "\nbetween\n" + CALL("b") + "\nafter",
               False, None, "Before.\n\nbetween\n\nafter", [("a", {}), ("b", {})]))
    mal_unclosed = "Sure.\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n"
    c.append(P("malformed_no_end_tool_call", mal_unclosed, False, None, mal_unclosed.strip()))
    mal_nofunc_end = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>"
    c.append(P("malformed_no_end_function", mal_nofunc_end, False, None, mal_nofunc_end))
    mal_param = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>"
    c.append(P("malformed_unterminated_parameter", mal_param, False, None, mal_param))
    mal_name = "<tool_call>\n<function=>\n</function>\n</tool_call>"
    c.append(P("malformed_empty_name", mal_name, False, None, mal_name))
    mal_junk = "<tool_call>\n<function=f>\njunk here\n</function>\n</tool_call>"
    c.append(P("malformed_junk_in_function", mal_junk, False, None, mal_junk))
    mal_nofunc = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
    c.append(P("malformed_json_style_call", mal_nofunc, False, None, mal_nofunc))
    mal_key = "<tool_call>\n<function=f>\n<parameter=>\n1\n</parameter>\n</function>\n</tool_call>"
    c.append(P("malformed_empty_parameter_name", mal_key, False, None, mal_key))
    mal_newline_name = "<tool_call>\n<function=f\ng>\n</function>\n</tool_call>"
    c.append(P("malformed_newline_in_name", mal_newline_name, False, None, mal_newline_name))
    c.append(P("malformed_then_good", mal_name + "\n" + CALL("g", ("k", "v")), False, None, mal_name,
               [("g", {"k": "v"})]))
    c.append(P("good_then_truncated", CALL("g", ("k", "v")) + "\n<tool_call>\n<function=h>\n<param", False,
               None, "<tool_call>\n<function=h>\n<param", [("g", {"k": "v"})]))
    c.append(P("call_inside_reasoning_not_parsed", CALL("f", ("a", "1")) + "\n</think>\ndone", True,
               CALL("f", ("a", "1")), "done"))
    c.append(P("im_end_left_alone", "answer<|im_end|>", False, None, "answer<|im_end|>"))
    c.append(P("unicode_everywhere", "réflexion 🤔\n</think>\n答案 " + CALL("翻译", ("texte", "bonjour ✔")),
               True, "réflexion 🤔", "答案", [("翻译", {"texte": "bonjour ✔"})]))
    c.append(P("name_with_spaces_trimmed", "<tool_call>\n<function= spaced >\n</function>\n</tool_call>", False,
               None, "", [("spaced", {})]))
    return c


# ---------------------------------------------------------------------------------------------
# Random conversations for a differential check

def random_cases(n, seed):
    rng = random.Random(seed)
    texts = ["", " ", "hi", "Hello, world!", "  padded  ", "\n\nnl\n", "<think>t</think>c", "<think>open",
             "close</think>x", "a<think>b</think>c<think>d</think>e", "é世😀", "\u3000\xa0x\u2028", "it's",
             'say "x"', "back\\slash", "<tool_call>", "{{x}}", "\x1b\x7f", "<think>\n</think>\n", "</think>"]
    scalars = [None, True, False, 0, 1, -5, 2.5, 1e20, 1e-7, -0.0, 0.1, 12345678901234567890]

    # characters the printers treat differently: Python's whitespace, repr's escapes and
    # non-printables (assigned ones only: unassigned code points are a known gap), quotes
    odd_chars = ("\t\n\r\x0b\x0c\x1c\x1f \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
                 "\x00\x01\x1b\x7f\x80\x9f\xad\u0600\u061c\u200b\u200f\u2066\ufeff\ufffb"
                 "\U000110bd\U000e0001\U000e007f\U000f0000\U0010fffd\u180e\ud7fb\ue000"
                 "'\"\\/<>&éß世😀\u0301")

    def odd_text():
        return "".join(rng.choice(odd_chars + "ab ") for _ in range(rng.randint(0, 8)))

    def rand_float():
        r = rng.random()
        if r < 0.4:
            return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if r < 0.7:
            return rng.choice([1, -1]) * 2.0 ** rng.randint(-1074, 1023)
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 12)) * 10.0 ** rng.randint(-30, 30)

    def value(d=0):
        r = rng.random()
        if r < 0.1:
            f = rand_float()
            return f if f == f and abs(f) != float("inf") else 0.5
        if r < 0.2:
            return odd_text()
        if d > 2 or r < 0.5:
            return rng.choice(scalars + texts)
        if r < 0.75:
            return [value(d + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["a", "b", "k", "type", "é", "name", "x y"]): value(d + 1) for _ in range(rng.randint(0, 3))}

    def content():
        r = rng.random()
        if r < 0.15:
            return odd_text()
        if r < 0.75:
            return rng.choice(texts)
        if r < 0.8:
            return None
        return value()

    def tool():
        props = {}
        for _ in range(rng.randint(0, 3)):
            p = {}
            for k in rng.sample(["type", "description", "enum", "items", "default", "name", "minimum"], rng.randint(0, 4)):
                p[k] = value() if rng.random() < 0.3 else rng.choice(texts + ["string", ["a", "b"]])
            props[rng.choice(["p", "q", "r", "ü"])] = p if rng.random() < 0.9 else value()
        params = {"type": "object", "properties": props}
        if rng.random() < 0.5:
            params["required"] = list(props)[:1]
        if rng.random() < 0.3:
            params["additionalProperties"] = value()
        f = {"name": rng.choice(["f", "g", "get_weather"]), "parameters": params}
        if rng.random() < 0.7:
            f["description"] = rng.choice(texts) if rng.random() < 0.9 else value()
        if rng.random() < 0.2:
            f["strict"] = value()
        if rng.random() < 0.1:
            del f["parameters"]
        return {"type": "function", "function": f} if rng.random() < 0.9 else f

    def tool_calls():
        calls = []
        for _ in range(rng.randint(0, 3)):
            args = {rng.choice(["a", "b", "city", "n"]): value() for _ in range(rng.randint(0, 3))}
            if rng.random() < 0.3:
                args = json.dumps(args)
            f = {"name": rng.choice(["f", "g", ""]), "arguments": args}
            if rng.random() < 0.1:
                del f["arguments"]
            calls.append({"type": "function", "function": f} if rng.random() < 0.9 else f)
        return calls

    out = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(texts)})
        for _ in range(rng.randint(1, 7)):
            role = rng.choice(["user", "user", "assistant", "assistant", "tool", "system", "developer"])
            m = {"role": role, "content": content()}
            if role == "developer" and not isinstance(m["content"], str):
                m["content"] = "dev"
            if role == "assistant":
                if rng.random() < 0.4:
                    m["reasoning_content"] = rng.choice(texts) if rng.random() < 0.9 else value()
                if rng.random() < 0.4:
                    m["tool_calls"] = tool_calls()
                if rng.random() < 0.1:
                    del m["content"]
            msgs.append(m)
        tools = [tool() for _ in range(rng.randint(1, 3))] if rng.random() < 0.4 else None
        opts = {}
        for k in ("add_generation_prompt", "enable_thinking", "truncate_history_thinking"):
            if rng.random() < 0.6:
                opts[k] = rng.random() < 0.5
        out.append({"name": "random_%d" % i, "messages": msgs, "tools": tools, "options": opts})
    return out


def finish(tpl, cases, need_error_index):
    for case in cases:
        try:
            text = render(tpl, case)
        except Exception as e:  # jinja2's errors and the server step's json.loads
            if need_error_index and "error_index" not in case:
                raise SystemExit("%s: unexpected failure: %r" % (case["name"], e))
            case["error"] = "%s: %s" % (type(e).__name__, e)
            continue
        if "error_index" in case:
            raise SystemExit("%s: expected a failure, got %r" % (case["name"], text))
        case["expected"] = text
    return cases


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def fuzz_seeds(outdir):
    """Seeds for tests/fuzz/fuzz_chat.c from the fixtures: a flags byte, the messages JSON, a
    NUL and the tools JSON; and a flags byte then the text of each parse case."""
    fixtures = os.path.join(ROOT, "tests", "fixtures", "chat")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(fixtures, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for i, c in enumerate(cases):
        o = c["options"]
        flags = (o.get("add_generation_prompt", False) | o.get("enable_thinking", True) << 1 |
                 o.get("truncate_history_thinking", True) << 2 | (i % 4) << 4)
        data = (c.get("messages_json") or json.dumps(c["messages"], ensure_ascii=False)).encode()
        if c["tools"] is not None:
            flags |= 8
            data += b"\0" + json.dumps(c["tools"], ensure_ascii=False).encode()
        with open(os.path.join(outdir, "render_%03d" % i), "wb") as f:
            f.write(bytes([flags]) + data)
    with open(os.path.join(fixtures, "parse_cases.json"), encoding="utf-8") as f:
        pcases = json.load(f)
    for i, c in enumerate(pcases):
        with open(os.path.join(outdir, "parse_%03d" % i), "wb") as f:
            f.write(bytes([16 if c["thinking_in_prompt"] else 0]) + c["text"].encode())
    print("%d seeds -> %s" % (len(cases) + len(pcases), outdir))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fuzz-seeds":
        fuzz_seeds(sys.argv[2])
        return
    tpl = compile_template(TEMPLATE)
    if len(sys.argv) == 5 and sys.argv[1] == "--random":
        cases = finish(tpl, random_cases(int(sys.argv[2]), int(sys.argv[3])), False)
        write(sys.argv[4], cases)
        print("%d random cases (%d errors) -> %s" % (len(cases), sum("error" in c for c in cases), sys.argv[4]))
        return
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "chat")
    os.makedirs(outdir, exist_ok=True)
    cases = finish(tpl, render_cases(), True)
    write(os.path.join(outdir, "cases.json"), cases)
    pcases = parse_cases()
    write(os.path.join(outdir, "parse_cases.json"), pcases)
    print("%d render cases (%d errors), %d parse cases -> %s" % (
        len(cases), sum("error" in c for c in cases), len(pcases), outdir))


if __name__ == "__main__":
    main()
