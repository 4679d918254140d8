/* test_server_request.c - the server's request parser (src/server/request.c) on good, bad and
 * mutated bodies, and the stream splitter of responses.c on a reply with reasoning and a call.
 *
 *  - well-formed chat and completion bodies fill the struct with what they say (the
 *    "speculative" field in each of its forms too);
 *  - each kind of bad field gives a 400 naming it; an unknown model a 404;
 *  - fuzz: 30000 mutations of valid bodies (bytes flipped, inserted, deleted, cut, spliced
 *    from other bodies, JSON tokens dropped in) and 2000 random byte strings: the parser never
 *    crashes (the ASan build checks every access), and every outcome is either a complete
 *    request or a 4xx error whose JSON parses back with a message.
 *  - a streamed chat reply is split into reasoning, content and tool_calls, holding back text
 *    that may still become "</think>" or "<tool_call>".
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "server/responses.h"
#include "server/slots.h"
#include "test.h"

static const struct request_limits lim = {"demo", 1000};

static int parse(const char *body, enum request_kind kind, struct server_request *r, struct api_error *e) {
    return request_parse(body, strlen(body), kind, &lim, r, e);
}

static void check_error(const char *body, enum request_kind kind, int status, const char *param) {
    struct server_request r;
    struct api_error e;
    int rc = parse(body, kind, &r, &e);
    CHECK(rc == -1 && e.status == status, "%s: rc %d status %d, expected %d", body, rc, e.status, status);
    if (param) CHECK(!strcmp(e.param, param), "%s: param '%s', expected '%s'", body, e.param, param);
    CHECK(e.message[0], "%s: no message", body);
    request_free(&r);
}

static void good_bodies(void) {
    struct server_request r;
    struct api_error e;
    const char *chat = "{\"model\":\"demo\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"max_completion_tokens\":7,"
                       "\"stop\":[\"x\",\"yy\"],\"seed\":42,\"presence_penalty\":1,\"frequency_penalty\":-0.5,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"chat_template_kwargs\":{\"enable_thinking\":false}} \n";
    int rc = parse(chat, REQUEST_CHAT, &r, &e);
    CHECK(rc == 0, "chat: %s", e.message);
    if (!rc) {
        CHECK(r.sampling.temperature == 0.5f && r.sampling.top_p == 0.9f && r.sampling.top_k == 40 &&
                  r.sampling.min_p == 0.05f && r.sampling.presence_penalty == 1 && r.sampling.frequency_penalty == -0.5f,
              "sampling fields");
        CHECK(r.seed_given && r.sampling.seed == 42, "seed");
        CHECK(r.max_tokens == 7 && r.n_stop == 2 && !strcmp(r.stop[1], "yy"), "length and stop");
        CHECK(r.stream && r.include_usage && !r.enable_thinking, "stream flags");
        CHECK(r.messages_json && strstr(r.messages_json, "\"content\":\"ab\""), "parts joined: %s", r.messages_json);
        CHECK(!r.tools_json, "no tools");
    }
    request_free(&r);
    rc = parse("{\"prompt\":[1,2,999],\"stop\":\"\\n\"}", REQUEST_COMPLETION, &r, &e);
    CHECK(rc == 0 && r.n_prompt_ids == 3 && r.prompt_ids[2] == 999 && r.n_stop == 1 && !r.prompt_text,
          "completion ids: %s", e.message);
    request_free(&r);
    rc = parse("{\"prompt\":\"hello\"}", REQUEST_COMPLETION, &r, &e);
    CHECK(rc == 0 && r.prompt_text && !strcmp(r.prompt_text, "hello") && r.enable_thinking && !r.stream, "completion text");
    request_free(&r);
    rc = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"parameters\":{}}}],\"tool_choice\":\"none\"}",
               REQUEST_CHAT, &r, &e);
    CHECK(rc == 0 && !r.tools_json, "tool_choice none drops the tools");
    request_free(&r);
    /* "speculative": absent, a boolean, or {type, max} */
    static const struct {
        const char *field;
        enum request_spec spec;
        int max;
    } specs[] = {
        {"", REQUEST_SPEC_DEFAULT, 0},
        {",\"speculative\":false", REQUEST_SPEC_OFF, 0},
        {",\"speculative\":true", REQUEST_SPEC_ON, 0},
        {",\"speculative\":{}", REQUEST_SPEC_ON, 0},
        {",\"speculative\":{\"max\":5}", REQUEST_SPEC_ON, 5},
        {",\"speculative\":{\"type\":\"ngram\",\"max\":64}", REQUEST_SPEC_NGRAM, 64},
        {",\"speculative\":{\"type\":\"draft\"}", REQUEST_SPEC_DRAFT, 0},
        {",\"speculative\":{\"type\":\"mtp\",\"max\":3}", REQUEST_SPEC_MTP, 3},
        {",\"speculative\":{\"type\":\"none\",\"max\":1}", REQUEST_SPEC_OFF, 1},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":\"x\"%s}", specs[i].field);
        rc = parse(body, REQUEST_COMPLETION, &r, &e);
        CHECK(rc == 0 && r.speculative == specs[i].spec && r.spec_max == specs[i].max, "%s: rc %d, speculative %d max %d",
              body, rc, (int)r.speculative, r.spec_max);
        request_free(&r);
    }
}

static void bad_bodies(void) {
    const enum request_kind C = REQUEST_CHAT, P = REQUEST_COMPLETION;
    check_error("", C, 400, NULL);
    check_error("{", C, 400, NULL);
    check_error("[]", C, 400, NULL);
    check_error("{} x", C, 400, NULL);
    check_error("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}{}", C, 400, NULL);
    check_error("{}", C, 400, "messages");
    check_error("{\"messages\":[]}", C, 400, "messages");
    check_error("{\"messages\":\"hi\"}", C, 400, "messages");
    check_error("{\"messages\":[1]}", C, 400, "messages[0]");
    check_error("{\"messages\":[{\"role\":\"robot\",\"content\":\"q\"}]}", C, 400, "messages[0].role");
    check_error("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", C, 400, "messages[0].content");
    check_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", C, 400, "messages[0].content");
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]";
    char body[512];
    static const char *fields[][2] = {
        {"\"temperature\":\"hot\"", "temperature"}, {"\"temperature\":true", "temperature"}, {"\"temperature\":3", "temperature"},
        {"\"top_p\":0", "top_p"},     {"\"top_p\":1.5", "top_p"},       {"\"top_k\":1.5", "top_k"},
        {"\"top_k\":-1", "top_k"},    {"\"min_p\":[]", "min_p"},        {"\"max_tokens\":0", "max_tokens"},
        {"\"max_tokens\":\"9\"", "max_tokens"}, {"\"max_completion_tokens\":-3", "max_completion_tokens"},
        {"\"stop\":5", "stop"},       {"\"stop\":[\"\"]", "stop"},      {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"},
        {"\"seed\":1.5", "seed"},     {"\"stream\":1", "stream"},       {"\"stream_options\":[]", "stream_options"},
        {"\"stream_options\":{\"include_usage\":\"yes\"}", "include_usage"}, {"\"n\":2", "n"},
        {"\"presence_penalty\":9", "presence_penalty"}, {"\"frequency_penalty\":null,\"model\":7", "model"},
        {"\"tools\":{}", "tools"},    {"\"tools\":[{\"type\":\"function\"}]", "tools"},
        {"\"chat_template_kwargs\":[]", "chat_template_kwargs"},
        {"\"chat_template_kwargs\":{\"enable_thinking\":0}", "enable_thinking"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", m, fields[i][0]);
        check_error(body, C, 400, fields[i][1]);
    }
    snprintf(body, sizeof body, "{%s,\"model\":\"other\"}", m);
    check_error(body, C, 404, "model");
    check_error("{\"prompt\":[1,1000]}", P, 400, "prompt");
    check_error("{\"prompt\":[1,-1]}", P, 400, "prompt");
    check_error("{\"prompt\":[1,\"a\"]}", P, 400, "prompt");
    check_error("{\"prompt\":[]}", P, 400, "prompt");
    check_error("{\"prompt\":\"\"}", P, 400, "prompt");
    check_error("{\"prompt\":{}}", P, 400, "prompt");
    check_error("{\"prompt\":\"a\",\"max_tokens\":1e999}", P, 400, NULL);
    /* a NUL escaped inside a string: as a C string it would be an empty prompt, a stop string ""
     * that matches everywhere, a model name matching "demo" by a prefix */
    check_error("{\"prompt\":\"\\u0000a\"}", P, 400, "prompt");
    check_error("{\"prompt\":[\"\\u0000\"]}", P, 400, "prompt");
    check_error("{\"prompt\":\"a\",\"stop\":[\"x\",\"\\u0000x\"]}", P, 400, "stop");
    check_error("{\"prompt\":\"a\",\"stop\":\"\\u0000\"}", P, 400, "stop");
    check_error("{\"prompt\":\"a\",\"model\":\"demo\\u0000x\"}", P, 400, "model");
    /* a NUL byte inside: json-c would stop there and accept the part before it */
    struct server_request r;
    struct api_error e;
    static const char with_nul[] = "{\"prompt\":\"a\"}\0 {";
    CHECK(request_parse(with_nul, sizeof with_nul - 1, P, &lim, &r, &e) == -1 && e.status == 400, "NUL byte accepted");
    request_free(&r);
    /* nesting beyond the tokener's depth is an error, not a deep recursion */
    char deep[4096];
    size_t at = (size_t)snprintf(deep, sizeof deep, "{\"prompt\":\"a\",\"x\":");
    for (int i = 0; i < 1000; i++) deep[at++] = '[';
    deep[at] = 0;
    check_error(deep, P, 400, NULL);
}

/* xorshift64*: a fixed, reproducible stream of mutations */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static const char *seeds[] = {
    "{\"model\":\"demo\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"hi\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
    "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"c\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
    "\"temperature\":0.7,\"max_tokens\":16,\"stop\":[\"\\n\\n\"],\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\\u00e9\\ud83d\\ude00\"}]}],"
    "\"chat_template_kwargs\":{\"enable_thinking\":false},\"seed\":-5,\"top_k\":3,\"min_p\":0.1}",
    "{\"prompt\":\"In the beginning\",\"max_tokens\":5,\"temperature\":0,\"stop\":\"God\",\"speculative\":{\"type\":\"ngram\",\"max\":8}}",
    "{\"prompt\":[1,2,3,4,5],\"stream\":false,\"presence_penalty\":0.5,\"frequency_penalty\":0.5,\"n\":1}",
};
static const char *tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "false", "-0", "1e308", "0.5",
                               "\\u0000", "\\ud800", "\"messages\"", "\"prompt\"", "\"role\"", "\"content\"", "\xff",
                               "\xc3", "9999999999999999999999", "\"stop\"", "[[[[[[", "]]]]"};

static void check_outcome(const char *body, size_t len, enum request_kind kind, int *accepted) {
    struct server_request r;
    struct api_error e;
    int rc = request_parse(body, len, kind, &lim, &r, &e);
    if (rc == 0) {
        (*accepted)++;
        int complete = kind == REQUEST_CHAT ? r.messages_json != NULL
                                            : (r.prompt_text != NULL) != (r.prompt_ids != NULL && r.n_prompt_ids > 0);
        CHECK(complete && r.n_stop <= REQUEST_MAX_STOP, "accepted an incomplete request: %.*s", (int)(len < 200 ? len : 200), body);
    } else {
        CHECK(rc == -1 && e.status >= 400 && e.status < 500 && e.message[0], "rc %d status %d for %.*s", rc, e.status,
              (int)(len < 200 ? len : 200), body);
        char *j = api_error_json(&e);
        json_object *o = j ? json_tokener_parse(j) : NULL, *err = NULL, *msg = NULL;
        CHECK(o && json_object_object_get_ex(o, "error", &err) && json_object_object_get_ex(err, "message", &msg) &&
                  json_object_is_type(msg, json_type_string),
              "error JSON does not parse back: %s", j ? j : "(null)");
        json_object_put(o);
        free(j);
    }
    request_free(&r);
}

static void fuzz(void) {
    enum { CAP = 4096 };
    static char buf[CAP];
    int accepted = 0, n_seeds = (int)(sizeof seeds / sizeof seeds[0]), n_tokens = (int)(sizeof tokens / sizeof tokens[0]);
    for (int iter = 0; iter < 30000; iter++) {
        const char *seed = seeds[rnd() % (uint64_t)n_seeds];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        int edits = 1 + (int)(rnd() % 4);
        for (int k = 0; k < edits && len > 0; k++) {
            size_t at = rnd() % len;
            switch (rnd() % 6) {
            case 0: buf[at] = (char)(rnd() & 0xff); break;                               /* flip */
            case 1:                                                                      /* delete a run */
                {
                    size_t n = 1 + rnd() % 8;
                    if (at + n > len) n = len - at;
                    memmove(buf + at, buf + at + n, len - at - n);
                    len -= n;
                }
                break;
            case 2: len = at; break;                                                     /* cut */
            case 3:                                                                      /* a JSON token in */
            case 4:
                {
                    const char *t = tokens[rnd() % (uint64_t)n_tokens];
                    size_t tl = strlen(t);
                    if (len + tl < CAP) {
                        memmove(buf + at + tl, buf + at, len - at);
                        memcpy(buf + at, t, tl);
                        len += tl;
                    }
                }
                break;
            default:                                                                     /* splice another seed's tail */
                {
                    const char *other = seeds[rnd() % (uint64_t)n_seeds];
                    size_t ol = strlen(other), from = rnd() % ol;
                    if (at + ol - from < CAP) {
                        memcpy(buf + at, other + from, ol - from);
                        len = at + ol - from;
                    }
                }
            }
        }
        check_outcome(buf, len, rnd() & 1 ? REQUEST_CHAT : REQUEST_COMPLETION, &accepted);
    }
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = rnd() % 256;
        for (size_t i = 0; i < len; i++) buf[i] = (char)(rnd() & 0xff);
        check_outcome(buf, len, REQUEST_CHAT, &accepted);
    }
    /* the mutations must leave some bodies valid, or the accepting side went untested */
    CHECK(accepted > 100, "only %d mutated bodies were accepted", accepted);
}

/* Feeds the reply to a stream in pieces, as a worker would, and collects the deltas by kind. */
static void stream_split(void) {
    const char *reply = "plan it</think>\n\nThe answer<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n"
                        "</function>\n</tool_call>";
    struct server_request req;
    memset(&req, 0, sizeof req);
    req.kind = REQUEST_CHAT;
    int32_t *prompt = malloc(sizeof *prompt);
    prompt[0] = 1;
    struct job *j = job_new(&req, prompt, 1);
    j->thinking_in_prompt = 1;
    struct stream st = {0};
    struct response_ctx c = {"chatcmpl-t", "demo", 0};
    struct sbuf out = {0};
    size_t len = strlen(reply);
    int held_ok = 1;
    for (size_t at = 0; at < len; at += 3) {
        size_t n = len - at < 3 ? len - at : 3;
        free(j->text);
        j->text = strndup(reply, at + n);
        j->len = j->ready = at + n;
        stream_advance(&st, j, &c, &out);
        /* no marker text ever leaks into a delta */
        held_ok &= !strstr(out.p ? out.p : "", "</thi") && !strstr(out.p ? out.p : "", "<tool");
    }
    j->done = 1;
    j->finish_reason = "stop";
    stream_advance(&st, j, &c, &out);
    CHECK(held_ok, "a marker leaked into the stream: %s", out.p);
    CHECK(strstr(out.p, "\"reasoning_content\":\"pla\"") && strstr(out.p, "{\"content\":\"T") &&
              !strstr(out.p, "{\"content\":\"\\n"), "deltas: %s", out.p);
    CHECK(strstr(out.p, "\"tool_calls\":[{\"index\":0") && strstr(out.p, "\"name\":\"f\"") &&
              strstr(out.p, "\"finish_reason\":\"tool_calls\""),
          "tool call: %s", out.p);
    size_t ol = strlen(out.p);
    CHECK(ol > 14 && !strcmp(out.p + ol - 14, "data: [DONE]\n\n"), "ends with [DONE]");
    CHECK(st.phase == STREAM_ENDED, "stream ended");
    free(out.p);
    job_release(j);
}

int main(void) {
    good_bodies();
    bad_bodies();
    fuzz();
    stream_split();
    return test_summary("test_server_request");
}
