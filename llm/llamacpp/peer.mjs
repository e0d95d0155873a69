// The llama.cpp peer: node-llama-cpp driven by token ids, one JSON request
// on stdin, one JSON answer on stdout. Modes:
//   info:   the llama.cpp build
//   greedy: {model, prompt, steps} → the greedy tokens after prompt
//   top1:   {model, tokens} → the argmax after each prefix of tokens
//   speed:  {model, threads, decode, seqs, prompt} → decode tokens/s at
//           batch 1 and aggregate over seqs concurrent sequences, over
//           wall time and over the process's CPU time
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const req = JSON.parse(readFileSync(0, "utf8"));
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({ gpu: false, build: "never", logLevel: "error", maxThreads: req.threads || 1 });
const release = llama.llamaCppRelease;
const out = { build: `llama.cpp ${release.release} (${release.repo}), ${llama.buildType}, node-llama-cpp`, system: llama.systemInfo };

function argmax(logits) {
  // logits is a Map of token → logit when filtered, else an array.
  let best = -1, bv = -Infinity;
  for (const [t, v] of logits) if (v > bv || (v === bv && t < best)) { best = t; bv = v; }
  return best;
}

async function nextLogits(seq, tokens) {
  const items = tokens.map((t, i) => i === tokens.length - 1 ? [t, { generateNext: { logits: true } }] : t);
  const res = await seq.controlledEvaluate(items);
  return res[tokens.length - 1].next.logits;
}

if (req.mode !== "info") {
  const model = await llama.loadModel({ modelPath: req.model, gpuLayers: 0 });
  const threads = req.threads || 1;
  if (req.mode === "greedy") {
    const ctx = await model.createContext({ contextSize: req.prompt.length + req.steps + 16, threads, batchSize: 512 });
    const seq = ctx.getSequence();
    let lg = await nextLogits(seq, req.prompt);
    out.tokens = [];
    for (let i = 0; i < req.steps; i++) {
      const t = argmax(lg);
      out.tokens.push(t);
      if (i + 1 < req.steps) lg = await nextLogits(seq, [t]);
    }
  } else if (req.mode === "top1") {
    const ctx = await model.createContext({ contextSize: req.tokens.length + 16, threads, batchSize: 512 });
    const seq = ctx.getSequence();
    const res = await seq.controlledEvaluate(req.tokens.map(t => [t, { generateNext: { logits: true } }]));
    out.top1 = res.map(r => argmax(r.next.logits));
  } else if (req.mode === "speed") {
    // Decode speed: the prompt is prefilled (not timed), then req.decode
    // tokens are generated greedily, timed; the same with req.seqs
    // sequences generating at once (one batched llama_decode a step).
    const run = async (n) => {
      const ctx = await model.createContext({ contextSize: n * (req.prompt.length + req.decode + 16), sequences: n, threads, batchSize: 512 });
      const seqs = Array.from({ length: n }, () => ctx.getSequence());
      await Promise.all(seqs.map(s => s.evaluateWithoutGeneratingNewTokens(req.prompt)));
      const start = process.hrtime.bigint();
      const cpu0 = process.cpuUsage();
      let total = 0;
      await Promise.all(seqs.map(async (s) => {
        // Each sequence feeds back a fixed token: what is timed is the
        // forward pass, as in our benchmark, not the sampler.
        for (let i = 0; i < req.decode; i++) {
          await s.evaluateWithoutGeneratingNewTokens([req.prompt[i % req.prompt.length]]);
          total++;
        }
      }));
      const secs = Number(process.hrtime.bigint() - start) / 1e9;
      const cpu = process.cpuUsage(cpu0);
      await ctx.dispose();
      return [total / secs, total / ((cpu.user + cpu.system) / 1e6)];
    };
    [out.tokens_per_s_batch1, out.cpu_tokens_per_s_batch1] = await run(1);
    [out.tokens_per_s_seqs, out.cpu_tokens_per_s_seqs] = await run(req.seqs);
  }
  await model.dispose();
}
process.stdout.write(JSON.stringify(out));
