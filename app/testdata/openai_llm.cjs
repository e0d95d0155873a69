// The unmodified npm openai client against dev's gateway, on the demo's
// real GGUF endpoint: the same seeded chat completion twice, then streamed
// with usage. Prints one JSON object for app's TestDemoLLMOpenAIClient.
const OpenAI = require(process.env.MP_OPENAI_MODULE);

async function main() {
  const client = new OpenAI({ baseURL: process.env.MP_BASE_URL, apiKey: process.env.MP_KEY, maxRetries: 0 });
  const req = {
    model: process.env.MP_MODEL,
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hello." }],
    max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 7,
  };
  const first = await client.chat.completions.create(req);
  const second = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = "", chunks = 0, usage = null, finish = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      content += ch.delta.content || "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  const one = (r) => ({ content: r.choices[0].message.content, finish_reason: r.choices[0].finish_reason, usage: r.usage, model: r.model });
  console.log(JSON.stringify({ first: one(first), second: one(second), stream: { content, chunks, usage, finish_reason: finish } }));
}

main().catch((e) => { console.error(e); process.exit(1); });
