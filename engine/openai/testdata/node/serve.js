// The official openai npm client against a live `batchd serve` with
// generation on (cmd/batchd's TestServeGeneration): streaming and not, a
// stop sequence, an unknown model, a wrong key, and a client that goes
// away mid-stream, after which the server's KV-cache gauge must go back
// to 0. Prints one JSON object of what the client saw.
//   node serve.js BASE_URL API_KEY '{"stop": "..."}'
const { OpenAI } = require("openai");

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.argv[3], maxRetries: 0 });
const args = JSON.parse(process.argv[4]);

// gauge reads one series of /metrics (open in the test's config).
async function gauge(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const m = text.match(new RegExp("^" + name + '\\{model="tiny"\\} (\\S+)$', "m"));
  return m ? Number(m[1]) : null;
}

async function collect(stream) {
  const s = { text: "", finish: null, usage: null, chunks: 0 };
  for await (const ch of stream) {
    s.chunks++;
    if (ch.usage) s.usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta && c.delta.content) s.text += c.delta.content;
      if (c.text) s.text += c.text;
      if (c.finish_reason) s.finish = c.finish_reason;
    }
  }
  return s;
}

async function main() {
  const out = {};
  out.models = (await client.models.list()).data.map((m) => m.id);

  const c = await client.completions.create({ model: "tiny", prompt: "hello", max_tokens: 20 });
  out.completion = { text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage };

  out.chatStream = await collect(await client.chat.completions.create({
    model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 30,
    stream: true, stream_options: { include_usage: true },
  }));

  out.completionStream = await collect(await client.completions.create({ model: "tiny", prompt: "stream me", max_tokens: 50, stream: true }));

  out.stopStream = await collect(await client.completions.create({ model: "tiny", prompt: "stop here", max_tokens: 50, stream: true, stop: [args.stop] }));

  try {
    await client.completions.create({ model: "nope", prompt: "x" });
    out.notFound = null;
  } catch (e) {
    out.notFound = { status: e.status, code: e.code, notFoundError: e instanceof OpenAI.NotFoundError };
  }
  try {
    const bad = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-wrong-key", maxRetries: 0 });
    await bad.models.list();
    out.badKey = null;
  } catch (e) {
    out.badKey = { status: e.status, authenticationError: e instanceof OpenAI.AuthenticationError };
  }

  // A client that goes away after its first token: the server must free
  // the sequence's KV blocks (the output alone would run for seconds).
  const ac = new AbortController();
  const long = await client.completions.create({ model: "tiny", prompt: "a long story", max_tokens: 1000, stream: true }, { signal: ac.signal });
  out.disconnect = { firstChunk: false, kvDuring: null, freedMs: null, aborted: false };
  try {
    for await (const ch of long) {
      if (!out.disconnect.firstChunk) {
        out.disconnect.firstChunk = true;
        out.disconnect.kvDuring = await gauge("batchd_gen_kv_blocks_used");
        ac.abort();
      }
    }
  } catch (e) {
    // The client's stream ends quietly on an abort, or throws it.
    if (!(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError")) throw e;
  }
  out.disconnect.aborted = ac.signal.aborted;
  const start = Date.now();
  while (Date.now() - start < 2000) {
    if ((await gauge("batchd_gen_kv_blocks_used")) === 0 && (await gauge("batchd_gen_sequences_running")) === 0) {
      out.disconnect.freedMs = Date.now() - start;
      break;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
