// The unmodified npm openai client against dev's gateway, on the demo's
// real GGUF endpoint, as a user meets it: the same seeded chat completion
// twice, then streamed with usage; a completion, plain and streamed;
// models.list and retrieve; a stream cancelled mid-way; and the 401, 404
// and 400 errors. With MP_CASE=429 it makes one call, which the test has
// rate-limited, and reports the error. Prints one JSON object for app's
// TestDemoLLMOpenAIClient.
'use strict';
const OpenAI = require(process.env.MP_OPENAI_MODULE);

const baseURL = process.env.MP_BASE_URL;
const model = process.env.MP_MODEL;
// No retries: the library retries 429 and 5xx by itself, which would hide
// the errors under test.
const client = new OpenAI({ baseURL, apiKey: process.env.MP_KEY, maxRetries: 0 });

// failure runs f, which must throw the library's APIError, and returns
// what the library made of the answer.
async function failure(f) {
  try {
    await f();
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    const h = err.headers;
    const retryAfter = h ? (typeof h.get === 'function' ? h.get('retry-after') : h['retry-after']) : null;
    return {
      class: err.constructor.name, status: err.status ?? null, type: err.type ?? null,
      code: err.code ?? null, param: err.param ?? null, message: err.message, retry_after: retryAfter ?? null,
    };
  }
  return { class: 'none' };
}

async function main() {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }];
  if (process.env.MP_CASE === '429') {
    const err = await failure(() => client.chat.completions.create({ model, messages, max_tokens: 2 }));
    process.stdout.write(JSON.stringify({ err_429: err }) + '\n');
    return;
  }
  // ignore_eos (vLLM's, which the built-in runtime takes) in each call that
  // wants text: the model is trained on the repository's docs, so where a
  // sample reaches its end of sequence moves with every docs change (one
  // ended this chat after four tokens); the answers are always max_tokens.
  const req = { model, messages, max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 7, ignore_eos: true };
  const first = await client.chat.completions.create(req);
  const second = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = '', chunks = 0, usage = null, finish = null, tokenChunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      content += ch.delta.content || '';
      if (ch.finish_reason) finish = ch.finish_reason;
      else tokenChunks++;
    }
  }
  const one = (r) => ({ content: r.choices[0].message.content, finish_reason: r.choices[0].finish_reason, usage: r.usage, model: r.model });
  const out = { first: one(first), second: one(second), stream: { content, chunks, token_chunks: tokenChunks, usage, finish_reason: finish } };

  const creq = { model, prompt: 'The gateway', max_tokens: 8, temperature: 0, seed: 7, ignore_eos: true };
  const comp = await client.completions.create(creq);
  out.completion = { object: comp.object, text: comp.choices[0].text, finish_reason: comp.choices[0].finish_reason, usage: comp.usage };
  const cstream = await client.completions.create({ ...creq, stream: true, stream_options: { include_usage: true } });
  const cs = { text: '', usage: null };
  for await (const chunk of cstream) {
    for (const c of chunk.choices) cs.text += c.text ?? '';
    if (chunk.choices.length === 0 && chunk.usage) cs.usage = chunk.usage;
  }
  out.completion_stream = cs;

  const models = [];
  for await (const m of client.models.list()) models.push({ id: m.id, object: m.object, owned_by: m.owned_by });
  out.models = models;
  out.retrieved = (await client.models.retrieve(model)).id;

  // Cancel mid-stream: read a few chunks of a long generation, then abort.
  const ac = new AbortController();
  const long = await client.chat.completions.create(
    { model, messages, max_tokens: 1500, temperature: 0, stream: true, ignore_eos: true }, { signal: ac.signal });
  let seen = 0;
  try {
    for await (const chunk of long) {
      if (chunk.choices.length > 0) seen++;
      if (seen === 3) {
        ac.abort();
        break;
      }
    }
  } catch (err) {
    if (!(err instanceof OpenAI.APIUserAbortError) && err.name !== 'AbortError') throw err;
  }
  out.cancel = { chunks: seen, aborted: ac.signal.aborted };

  const bad = new OpenAI({ baseURL, apiKey: 'mpk_000000000000_' + 'A'.repeat(43), maxRetries: 0 });
  out.err_401 = await failure(() => bad.chat.completions.create({ model, messages }));
  out.err_404 = await failure(() => client.chat.completions.create({ model: 'no-such-endpoint', messages }));
  out.err_n = await failure(() => client.chat.completions.create({ model, messages, n: 2 }));
  out.err_context = await failure(() => client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'x'.repeat(40000) }], max_tokens: 5,
  }));
  out.err_completion_context = await failure(() => client.completions.create({ model, prompt: 'word '.repeat(5000), max_tokens: 5 }));
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { console.error(e); process.exit(1); });
