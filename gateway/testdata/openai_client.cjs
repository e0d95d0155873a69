// Drives the gateway with the official OpenAI Node library, unmodified, as
// a user would: base URL <gateway>/v1, the API key, the endpoint as model.
// TestOpenAIClient (openai_client_test.go) starts the gateway and replicas,
// runs this script and asserts on the one JSON object it prints.
//
// Environment: MP_OPENAI_MODULE (the openai package's directory),
// MP_BASE_URL, MP_KEY, MP_MODEL (an LLM endpoint), MP_LIMITED (one whose
// rate limit allows one request), MP_CANCEL (one whose replica generates
// slowly), MP_PREDICT (a predict endpoint of the same team).
'use strict';
const OpenAI = require(process.env.MP_OPENAI_MODULE);

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(name + ' is not set');
  return v;
};
const baseURL = env('MP_BASE_URL');
const model = env('MP_MODEL');
// No retries: the library retries 429 and 5xx by itself, which would hide
// the errors under test.
const client = new OpenAI({ baseURL, apiKey: env('MP_KEY'), maxRetries: 0 });
const messages = [{ role: 'user', content: 'what does the gateway do?' }];

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
  const out = { version: require(process.env.MP_OPENAI_MODULE + '/package.json').version };

  const chat = await client.chat.completions.create({ model, messages, max_tokens: 5 });
  out.chat = {
    object: chat.object, content: chat.choices[0].message.content, role: chat.choices[0].message.role,
    finish_reason: chat.choices[0].finish_reason, usage: chat.usage,
  };

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  const s = { chunks: 0, content: '', finish_reason: null, usage: null, usage_choices: null, after_usage: 0 };
  for await (const chunk of stream) {
    s.chunks++;
    if (s.usage) s.after_usage++;
    for (const c of chunk.choices) {
      s.content += c.delta?.content ?? '';
      if (c.finish_reason) s.finish_reason = c.finish_reason;
    }
    if (chunk.choices.length === 0 && chunk.usage) {
      s.usage = chunk.usage;
      s.usage_choices = chunk.choices.length;
    }
  }
  out.stream = s;

  const comp = await client.completions.create({ model, prompt: 'The gateway', max_tokens: 4 });
  out.completion = { object: comp.object, text: comp.choices[0].text, finish_reason: comp.choices[0].finish_reason, usage: comp.usage };

  const cstream = await client.completions.create({
    model, prompt: 'The gateway', max_tokens: 3, stream: true, stream_options: { include_usage: true },
  });
  const cs = { text: '', usage: null };
  for await (const chunk of cstream) {
    for (const c of chunk.choices) cs.text += c.text ?? '';
    if (chunk.choices.length === 0 && chunk.usage) cs.usage = chunk.usage;
  }
  out.completion_stream = cs;

  const models = [];
  for await (const m of client.models.list()) models.push({ id: m.id, object: m.object, owned_by: m.owned_by, created: m.created });
  out.models = models;
  out.retrieved = (await client.models.retrieve(model)).id;

  // Cancel mid-stream: read a few chunks of a long generation, then abort.
  const ac = new AbortController();
  const long = await client.chat.completions.create(
    { model: env('MP_CANCEL'), messages, max_tokens: 4000, stream: true }, { signal: ac.signal });
  // The library ends the iteration quietly or throws its abort error,
  // depending on where the abort lands; either is a cancel.
  let seen = 0;
  let thrown = null;
  try {
    for await (const chunk of long) {
      if (chunk.choices.length > 0) seen++;
      if (seen === 3) {
        // Chunks already buffered may still be yielded after the abort:
        // stop reading, as a client that hangs up does.
        ac.abort();
        break;
      }
    }
  } catch (err) {
    if (!(err instanceof OpenAI.APIUserAbortError) && err.name !== 'AbortError') throw err;
    thrown = err.constructor.name;
  }
  out.cancel = { chunks: seen, aborted: ac.signal.aborted, thrown };

  const bad = new OpenAI({ baseURL, apiKey: 'mpk_000000000000_' + 'A'.repeat(43), maxRetries: 0 });
  out.err_401 = await failure(() => bad.chat.completions.create({ model, messages }));
  out.err_404 = await failure(() => client.chat.completions.create({ model: 'no-such-endpoint', messages }));
  out.err_404_predict = await failure(() => client.chat.completions.create({ model: env('MP_PREDICT'), messages }));
  out.err_n = await failure(() => client.chat.completions.create({ model, messages, n: 2 }));
  out.err_context = await failure(() => client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'x'.repeat(40000) }], max_tokens: 5,
  }));
  const limited = env('MP_LIMITED');
  out.limited_first = (await client.chat.completions.create({ model: limited, messages, max_tokens: 2 })).object;
  out.err_429 = await failure(() => client.chat.completions.create({ model: limited, messages, max_tokens: 2 }));

  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  process.stderr.write('openai_client: ' + (err && err.stack ? err.stack : String(err)) + '\n');
  process.exit(1);
});
