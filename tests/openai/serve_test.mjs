// serve_test.mjs - the official `openai` npm package (pinned in package.json) against a running
// `nemotron serve`: model list, chat plain and streamed, reasoning on and off, a tool-call round
// trip (a conversation holding a call and its result), completions, and the errors a client sees
// as typed exceptions (400, 401, 404, 413, 429). Run by tests/cli/test_serve.sh, which starts the
// servers: NEMOTRON_URL (with key NEMOTRON_KEY) and NEMOTRON_FULL_URL (a server whose queue is
// full). Prints one line; exits 1 when a check failed.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.NEMOTRON_URL + "/v1", apiKey: process.env.NEMOTRON_KEY, maxRetries: 0 });
let checks = 0, failed = 0;
function check(cond, what) {
  checks++;
  if (!cond) { failed++; console.error("FAIL openai: " + what); }
}
// expectStatus(promise, status, ErrorClass, what): the call fails with that status and class
async function expectStatus(p, status, cls, what) {
  try { await p; check(false, what + ": no error"); }
  catch (e) {
    check(e instanceof cls && e.status === status && typeof e.message === "string",
          `${what}: got ${e.constructor.name} ${e.status}, expected ${cls.name} ${status}`);
  }
}

// first, while the other server's queue is still full
const full = new OpenAI({ baseURL: process.env.NEMOTRON_FULL_URL + "/v1", apiKey: "none", maxRetries: 0 });
await expectStatus(full.completions.create({ model: "nemotron-h-kjv", prompt: "x", max_tokens: 2 }), 429,
                   OpenAI.RateLimitError, "full queue");

const models = await client.models.list();
const model = models.data[0]?.id;
check(model === "nemotron-h-kjv", "models.list: " + JSON.stringify(models.data));

const user = [{ role: "user", content: "Who made the light?" }];
const on = await client.chat.completions.create({ model, messages: user, max_tokens: 16, temperature: 0 });
check(on.choices[0].message.role === "assistant" && typeof on.choices[0].message.content === "string",
      "chat: " + JSON.stringify(on.choices[0]));
check(typeof on.choices[0].message.reasoning_content === "string", "reasoning on: reasoning_content present");
const off = await client.chat.completions.create({ model, messages: user, max_tokens: 16, temperature: 0,
                                                   chat_template_kwargs: { enable_thinking: false } });
check(off.choices[0].message.reasoning_content === undefined && off.choices[0].message.content.length > 0,
      "reasoning off: " + JSON.stringify(off.choices[0].message));
check(off.usage.prompt_tokens > 0 && off.usage.completion_tokens > 0 &&
      off.usage.prompt_tokens_details.cached_tokens >= 0, "usage: " + JSON.stringify(off.usage));

const stream = await client.chat.completions.create({ model, messages: user, max_tokens: 12, stream: true,
                                                      stream_options: { include_usage: true } });
let text = "", finish = null, usage = null, chunks = 0;
for await (const c of stream) {
  chunks++;
  if (c.usage) usage = c.usage;
  const ch = c.choices[0];
  if (!ch) continue;
  text += ch.delta.content ?? ch.delta.reasoning_content ?? "";
  if (ch.finish_reason) finish = ch.finish_reason;
}
check(chunks > 2 && text.length > 0 && (finish === "stop" || finish === "length") && usage?.completion_tokens > 0,
      `stream: ${chunks} chunks, finish ${finish}, usage ${JSON.stringify(usage)}`);

const tools = [{ type: "function", function: { name: "verse", description: "look up a verse",
                 parameters: { type: "object", properties: { book: { type: "string" } }, required: ["book"] } } }];
const round = await client.chat.completions.create({ model, tools, max_tokens: 8, temperature: 0, messages: [
  { role: "user", content: "Find Genesis." },
  { role: "assistant", content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "verse", arguments: '{"book":"Genesis"}' } }] },
  { role: "tool", tool_call_id: "call_1", content: "In the beginning God created the heaven and the earth." },
] });
check(["stop", "length", "tool_calls"].includes(round.choices[0].finish_reason), "tool round trip: " + JSON.stringify(round.choices[0]));

const comp = await client.completions.create({ model, prompt: "In the beginning", max_tokens: 8, temperature: 0 });
check(comp.choices[0].text.length > 0 && comp.usage.prompt_tokens > 0, "completions: " + JSON.stringify(comp));

await expectStatus(client.chat.completions.create({ model, messages: user, temperature: "hot" }), 400, OpenAI.BadRequestError, "wrong type");
await expectStatus(client.chat.completions.create({ model: "gpt-9", messages: user }), 404, OpenAI.NotFoundError, "unknown model");
await expectStatus(client.completions.create({ model, prompt: Array(1100).fill(422) }), 400, OpenAI.BadRequestError, "prompt too long");
await expectStatus(client.completions.create({ model, prompt: "a".repeat(9 << 20) }), 413, OpenAI.APIError, "body over the limit");
const stranger = new OpenAI({ baseURL: process.env.NEMOTRON_URL + "/v1", apiKey: "wrong", maxRetries: 0 });
await expectStatus(stranger.models.list(), 401, OpenAI.AuthenticationError, "wrong key");

console.log(`serve_test.mjs (openai package): ${checks} checks, ${failed} failed`);
process.exit(failed ? 1 : 0);
