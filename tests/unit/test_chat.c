/* test_chat.c - the chat format: every render case of tests/fixtures/chat/cases.json byte for
 * byte (what jinja2 rendered from the template, tools/reference/make_chat_fixtures.py), the
 * failures jinja2 raises as NEMOTRON_ERR_ARG naming the message, bad JSON as
 * NEMOTRON_ERR_FORMAT, and every hand-written parse case of parse_cases.json.
 *
 * usage: test_chat [EXTRA_CASES.json]   (from the repository root; the extra file, from
 * make_chat_fixtures.py --random, is checked like cases.json, minus the error index)
 */
#include "text/chat.h"

#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../test.h"

static struct nt_err err;

static struct nt_chat_options opts(int agp, int think, int trunc) {
    struct nt_chat_options o = {agp, think, trunc};
    return o;
}

static nemotron_status render_str(const char *msgs, const char *tools, struct nt_chat_options o,
                                  char **out, size_t *n) {
    memset(&err, 0, sizeof err);
    return nt_chat_render(msgs, strlen(msgs), tools, tools ? strlen(tools) : 0, &o, out, n, &err);
}

/* Prints where got and want first differ, with a little of each around it. */
static void show_diff(const char *name, const char *got, size_t gn, const char *want, size_t wn) {
    size_t i = 0;
    while (i < gn && i < wn && got[i] == want[i]) i++;
    size_t from = i > 30 ? i - 30 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu (got %zu bytes, want %zu)\n", name, i, gn,
            wn);
    fprintf(stderr, "    got:  ...%.*s...\n", (int)((gn - from) < 70 ? gn - from : 70), got + from);
    fprintf(stderr, "    want: ...%.*s...\n", (int)((wn - from) < 70 ? wn - from : 70),
            want + from);
}

static int get_bool(struct json_object *o, const char *key, int dflt) {
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) return dflt;
    return json_object_get_boolean(v);
}

/* Runs one case of cases.json; with_index: error cases carry "error_index". */
static void run_render_case(struct json_object *c, int with_index) {
    struct json_object *name_o, *msgs, *tools = NULL, *options = NULL, *expected, *raw, *idx;
    json_object_object_get_ex(c, "name", &name_o);
    const char *name = json_object_get_string(name_o);
    json_object_object_get_ex(c, "messages", &msgs);
    json_object_object_get_ex(c, "tools", &tools);
    json_object_object_get_ex(c, "options", &options);
    const int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
    char *mtext = nt_strdup(json_object_object_get_ex(c, "messages_json", &raw)
                                ? json_object_get_string(raw)
                                : json_object_to_json_string_ext(msgs, flags));
    char *ttext = tools ? nt_strdup(json_object_to_json_string_ext(tools, flags)) : NULL;
    struct nt_chat_options o =
        opts(get_bool(options, "add_generation_prompt", 0), get_bool(options, "enable_thinking", 1),
             get_bool(options, "truncate_history_thinking", 1));
    char *out = NULL;
    size_t n = 0;
    memset(&err, 0, sizeof err);
    nemotron_status st =
        nt_chat_render(mtext, strlen(mtext), ttext, ttext ? strlen(ttext) : 0, &o, &out, &n, &err);
    if (json_object_object_get_ex(c, "expected", &expected)) {
        const char *want = json_object_get_string(expected);
        size_t wn = (size_t)json_object_get_string_len(expected);
        int same = st == NEMOTRON_OK && n == wn && memcmp(out, want, wn) == 0 && out[n] == 0;
        CHECK(st == NEMOTRON_OK, "%s: status %d: %s", name, st, err.msg);
        CHECK(same, "%s: rendering differs from jinja2", name);
        if (st == NEMOTRON_OK && !same) show_diff(name, out, n, want, wn);
    } else {
        struct json_object *why = NULL;
        json_object_object_get_ex(c, "error", &why);
        CHECK(st == NEMOTRON_ERR_ARG, "%s: status %d (%s), want NEMOTRON_ERR_ARG as jinja2's %s",
              name, st, err.msg, json_object_get_string(why));
        CHECK(out == NULL, "%s: output left on failure", name);
        if (with_index && json_object_object_get_ex(c, "error_index", &idx)) {
            char needle[32];
            snprintf(needle, sizeof needle, "messages[%d]", json_object_get_int(idx));
            CHECK(strstr(err.msg, needle) != NULL, "%s: message does not name %s: %s", name, needle,
                  err.msg);
        }
    }
    nt_free(out);
    nt_free(mtext);
    nt_free(ttext);
}

static int run_render_file(const char *path, int with_index) {
    struct json_object *cases = json_object_from_file(path);
    CHECK(cases && json_object_is_type(cases, json_type_array), "cannot read %s", path);
    if (!cases) return 0;
    int n = (int)json_object_array_length(cases);
    for (int i = 0; i < n; i++) run_render_case(json_object_array_get_idx(cases, i), with_index);
    json_object_put(cases);
    return n;
}

/* A NULL-or-string field against the fixture's string-or-null. */
static int same_opt_str(const char *got, struct json_object *want) {
    if (!want) return got == NULL;
    return got && strcmp(got, json_object_get_string(want)) == 0;
}

static void run_parse_case(struct json_object *c) {
    struct json_object *name_o, *text, *think, *exp, *reasoning, *content, *unclosed, *calls;
    json_object_object_get_ex(c, "name", &name_o);
    const char *name = json_object_get_string(name_o);
    json_object_object_get_ex(c, "text", &text);
    json_object_object_get_ex(c, "thinking_in_prompt", &think);
    json_object_object_get_ex(c, "expected", &exp);
    json_object_object_get_ex(exp, "reasoning", &reasoning);
    json_object_object_get_ex(exp, "content", &content);
    json_object_object_get_ex(exp, "reasoning_unclosed", &unclosed);
    json_object_object_get_ex(exp, "calls", &calls);
    struct nt_chat_parsed p;
    memset(&err, 0, sizeof err);
    nemotron_status st =
        nt_chat_parse(json_object_get_string(text), (size_t)json_object_get_string_len(text),
                      json_object_get_boolean(think), &p, &err);
    CHECK(st == NEMOTRON_OK, "%s: status %d: %s", name, st, err.msg);
    if (st != NEMOTRON_OK) return;
    CHECK(same_opt_str(p.reasoning, reasoning), "%s: reasoning [%s], want [%s]", name,
          p.reasoning ? p.reasoning : "(null)",
          reasoning ? json_object_get_string(reasoning) : "(null)");
    CHECK(p.content && strcmp(p.content, json_object_get_string(content)) == 0,
          "%s: content [%s], want [%s]", name, p.content ? p.content : "(null)",
          json_object_get_string(content));
    CHECK(p.reasoning_unclosed == json_object_get_boolean(unclosed), "%s: reasoning_unclosed %d",
          name, p.reasoning_unclosed);
    int nw = (int)json_object_array_length(calls);
    CHECK(p.n_calls == nw, "%s: %d calls, want %d", name, p.n_calls, nw);
    for (int i = 0; i < p.n_calls && i < nw; i++) {
        struct json_object *w = json_object_array_get_idx(calls, i), *wname, *wargs;
        json_object_object_get_ex(w, "name", &wname);
        json_object_object_get_ex(w, "arguments", &wargs);
        CHECK(strcmp(p.calls[i].name, json_object_get_string(wname)) == 0, "%s: call %d name [%s]",
              name, i, p.calls[i].name);
        struct json_object *got = json_tokener_parse(p.calls[i].arguments_json);
        CHECK(got && json_object_equal(got, wargs), "%s: call %d arguments %s, want %s", name, i,
              p.calls[i].arguments_json, json_object_to_json_string(wargs));
        json_object_put(got);
    }
    nt_chat_parsed_free(&p);
}

static int run_parse_file(const char *path) {
    struct json_object *cases = json_object_from_file(path);
    CHECK(cases && json_object_is_type(cases, json_type_array), "cannot read %s", path);
    if (!cases) return 0;
    int n = (int)json_object_array_length(cases);
    for (int i = 0; i < n; i++) run_parse_case(json_object_array_get_idx(cases, i));
    json_object_put(cases);
    return n;
}

/* Inputs jinja2 never sees: JSON that Python's json.loads rejects, and wrong top-level shapes. */
static void test_bad_input(void) {
    static const char *const bad_json[] = {
        "",
        "[",
        "[{\"role\":\"user\",\"content\":\"x\"}",
        "[{\"role\":\"user\",\"content\":\"x\"},]",
        "[{'role':'user','content':'x'}]",
        "[{\"role\":\"user\",\"content\":\"x\"}] extra",
        "[{\"role\":\"user\",\"content\":\"x\"}] /* comment */",
        "[{\"role\":\"user\",\"content\":\"a\tb\"}]",         /* raw control character */
        "[{\"role\":\"user\",\"content\":\"\xff\"}]",         /* not UTF-8 */
        "[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]", /* an encoded surrogate */
        "[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]",     /* overlong */
        "[{\"role\":\"user\",\"content\":01}]",
        "[{\"role\":\"user\",\"content\":1.}]",
        "[{\"role\":\"user\",\"content\":.5}]",
        "[{\"role\":\"user\",\"content\":1e}]",
        "[{\"role\":\"user\",\"content\":\"\\x41\"}]",
        "[{\"role\":\"user\",\"content\":\"\\u12\"}]",
        "[{\"role\":\"user\",\"content\":True}]",
        "[{\"role\":\"user\",\"content\":nan}]",
        "[{\"role\":\"user\",\"content\":\"x\",}]",
        "[{\"a\\u0000b\":1,\"role\":\"user\"}]", /* json-c keys are C strings */
        "\xef\xbb\xbf[]",                        /* a BOM */
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        char *out = (char *)1;
        nemotron_status st = render_str(bad_json[i], NULL, opts(1, 1, 1), &out, NULL);
        CHECK(st == NEMOTRON_ERR_FORMAT, "bad JSON %zu: status %d (%s)", i, st, err.msg);
        CHECK(out == NULL, "bad JSON %zu: output left", i);
        CHECK(strstr(err.msg, "messages") != NULL, "bad JSON %zu: message lacks the name: %s", i,
              err.msg);
    }
    /* nesting: 256 levels read, 257 do not */
    char deep[1200];
    for (int depth = 255; depth <= 256; depth++) {
        size_t k = 0;
        k += (size_t)sprintf(deep + k, "[{\"role\":\"user\",\"content\":");
        for (int j = 0; j < depth - 1; j++) deep[k++] = '[';
        for (int j = 0; j < depth - 1; j++) deep[k++] = ']';
        k += (size_t)sprintf(deep + k, "}]");
        deep[k] = 0;
        char *out = NULL;
        nemotron_status st = render_str(deep, NULL, opts(0, 1, 1), &out, NULL);
        CHECK(st == (depth == 255 ? NEMOTRON_OK : NEMOTRON_ERR_FORMAT), "depth %d: status %d",
              depth + 1, st);
        nt_free(out);
    }
    static const char *const bad_shape[] = {"{}", "null", "\"text\"", "3"};
    for (size_t i = 0; i < sizeof bad_shape / sizeof bad_shape[0]; i++) {
        char *out = NULL;
        nemotron_status st = render_str(bad_shape[i], NULL, opts(1, 1, 1), &out, NULL);
        CHECK(st == NEMOTRON_ERR_ARG, "messages %s: status %d", bad_shape[i], st);
    }
    const char *msgs = "[{\"role\":\"user\",\"content\":\"x\"}]";
    static const char *const bad_tools[] = {"{}", "\"x\"", "[1]", "[{\"name\":\"f\"}, null]"};
    for (size_t i = 0; i < sizeof bad_tools / sizeof bad_tools[0]; i++) {
        char *out = NULL;
        nemotron_status st = render_str(msgs, bad_tools[i], opts(1, 1, 1), &out, NULL);
        CHECK(st == NEMOTRON_ERR_ARG, "tools %s: status %d", bad_tools[i], st);
        CHECK(strstr(err.msg, "tools") != NULL, "tools %s: %s", bad_tools[i], err.msg);
    }
    char *out = NULL;
    nemotron_status st = render_str(msgs, "[{\"name\":", opts(1, 1, 1), &out, NULL);
    CHECK(st == NEMOTRON_ERR_FORMAT && strstr(err.msg, "tools"), "bad tools JSON: %d %s", st,
          err.msg);
    struct nt_chat_options o = opts(1, 1, 1);
    st = nt_chat_render(msgs, strlen(msgs), NULL, 0, NULL, &out, NULL, &err);
    CHECK(st == NEMOTRON_ERR_ARG, "no options: %d", st);
    st = nt_chat_render(NULL, 5, NULL, 0, &o, &out, NULL, &err);
    CHECK(st == NEMOTRON_ERR_ARG, "NULL messages: %d", st);
}

/* tools NULL, "null" and "[]" all mean no tools; out_len is the length. */
static void test_no_tools_forms(void) {
    const char *msgs = "[{\"role\":\"user\",\"content\":\"Hi\"}]";
    const char *want = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n<think>\n";
    const char *forms[] = {NULL, "null", " [ ] "};
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        size_t n = 0;
        nemotron_status st = render_str(msgs, forms[i], opts(1, 1, 1), &out, &n);
        CHECK(st == NEMOTRON_OK && strcmp(out, want) == 0 && n == strlen(want), "tools form %d: %s",
              i, out ? out : err.msg);
        nt_free(out);
    }
    /* MODEL.md 5.3's two examples */
    char *out = NULL;
    render_str(msgs, NULL, opts(1, 0, 1), &out, NULL);
    CHECK(out && strcmp(out, "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\n<think></think>") == 0,
          "thinking off: %s", out);
    nt_free(out);
}

/* Exact arguments_json text: compact, in order, numbers as written, big integers kept. */
static void test_parse_exact(void) {
    const char *text = "<tool_call>\n<function=f>\n<parameter=id>\n123456789012345678901234567890\n"
                       "</parameter>\n<parameter=x>\n1.50\n</parameter>\n<parameter=s>\na/b \"q\"\n"
                       "</parameter>\n<parameter=o>\n{ \"k\" : [ 1 , -0 ] }\n</parameter>\n"
                       "<parameter=n>\nnull\n</parameter>\n</function>\n</tool_call>";
    struct nt_chat_parsed p;
    nemotron_status st = nt_chat_parse(text, strlen(text), 0, &p, &err);
    CHECK(st == NEMOTRON_OK && p.n_calls == 1, "exact: %d calls", p.n_calls);
    if (p.n_calls == 1)
        CHECK(strcmp(p.calls[0].arguments_json,
                     "{\"id\":123456789012345678901234567890,\"x\":1.50,"
                     "\"s\":\"a/b \\\"q\\\"\",\"o\":{\"k\":[1,0]},\"n\":null}") == 0,
              "exact: %s", p.calls[0].arguments_json);
    nt_chat_parsed_free(&p);
    CHECK(p.calls == NULL && p.content == NULL, "parsed_free leaves the struct empty");
    /* NULL with length 0 is an empty text; garbage never fails */
    st = nt_chat_parse(NULL, 0, 1, &p, &err);
    CHECK(st == NEMOTRON_OK && p.reasoning_unclosed && p.content && !*p.content, "NULL text: %d",
          st);
    nt_chat_parsed_free(&p);
    const char junk[] = "\xff\xfe<tool_call><function=\x80>\n</function></tool_call>\0<think>";
    st = nt_chat_parse(junk, sizeof junk - 1, 0, &p, &err);
    CHECK(st == NEMOTRON_OK && p.n_calls == 1, "junk: %d %d", st, p.n_calls);
    nt_chat_parsed_free(&p);
    nt_chat_parsed_free(NULL);
}

/* Python's float repr over many doubles: each must read back, in the shortest form. */
static void test_round_trip_floats(void) {
    /* every power of two is the case where the nearest p-digit decimal may fail to read back
     * while its neighbour reads back; cases.json has the rest of the formatting */
    int bad = 0;
    for (int e = -1074; e <= 1023 && bad < 5; e++) {
        char msgs[200];
        snprintf(msgs, sizeof msgs, "[{\"role\":\"user\",\"content\":[%.17g]}]", ldexp(1.0, e));
        char *out = NULL;
        if (render_str(msgs, NULL, opts(0, 1, 1), &out, NULL) != NEMOTRON_OK) {
            bad++;
            continue;
        }
        const char *p = strstr(out, "user\n[") + 6;
        double back = strtod(p, NULL);
        if (back != ldexp(1.0, e)) {
            bad++;
            fprintf(stderr, "  2^%d printed as %.30s\n", e, p);
        }
        nt_free(out);
    }
    CHECK(bad == 0, "%d powers of two do not read back", bad);
}

int main(int argc, char **argv) {
    int n = run_render_file(FIXTURES "/chat/cases.json", 1);
    CHECK(n >= 40, "only %d render cases", n);
    n = run_parse_file(FIXTURES "/chat/parse_cases.json");
    CHECK(n >= 20, "only %d parse cases", n);
    test_bad_input();
    test_no_tools_forms();
    test_parse_exact();
    test_round_trip_floats();
    if (argc > 1) run_render_file(argv[1], 0);
    return test_summary("chat");
}
