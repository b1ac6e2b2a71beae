// The official openai npm client against batchd's OpenAI-compatible API
// (engine/openai's TestNodeClient): every call as a user would write it.
// Prints one JSON object of what the client saw.
const { OpenAI } = require("openai");

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-test", maxRetries: 0 });

async function main() {
  const out = {};
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const c = await client.completions.create({ model: "tiny", prompt: "hi", max_tokens: 5 });
  out.completion = { text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage, object: c.object };

  const chat = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }] });
  out.chat = { content: chat.choices[0].message.content, role: chat.choices[0].message.role, finish: chat.choices[0].finish_reason };

  const stream = await client.chat.completions.create({
    model: "tiny",
    messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }],
    stream: true,
    stream_options: { include_usage: true },
    stop: ["world"],
  });
  const s = { text: "", usage: null, finish: null, chunks: 0, role: null };
  for await (const ch of stream) {
    s.chunks++;
    if (ch.usage) s.usage = ch.usage;
    for (const choice of ch.choices) {
      if (choice.delta && choice.delta.role) s.role = choice.delta.role;
      if (choice.delta && choice.delta.content) s.text += choice.delta.content;
      if (choice.finish_reason) s.finish = choice.finish_reason;
    }
  }
  out.chatStream = s;

  const cs = await client.completions.create({ model: "tiny", prompt: "p", max_tokens: 3, stream: true });
  let text = "";
  for await (const ch of cs) text += ch.choices.map((x) => x.text).join("");
  out.completionStream = text;

  try {
    await client.completions.create({ model: "nope", prompt: "x" });
    out.notFound = null;
  } catch (e) {
    out.notFound = { status: e.status, code: e.code, type: e.type, param: e.param, notFoundError: e instanceof OpenAI.NotFoundError };
  }
  try {
    await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], n: 3 });
    out.badRequest = null;
  } catch (e) {
    out.badRequest = { status: e.status, param: e.param, badRequestError: e instanceof OpenAI.BadRequestError };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
