// Streams one chat completion from an OpenAI-compatible server with the official `openai`
// npm client and prints the streamed text, so a test can check that the client accepts our
// SSE chunks, [DONE] and usage chunk, and parses our error bodies into its APIError.
//   SCD_OPENAI_BASE_URL   e.g. http://127.0.0.1:8080/v1 (required)
//   SCD_OPENAI_API_KEY    sent as the Bearer key (default "none")
//   SCD_OPENAI_MODEL      model name (default "fake-model")
//   SCD_OPENAI_MAX_TOKENS (default 8)
// Output: "MODEL <id> <object>" from models.retrieve of the model, "MISSING <status>" from
// models.retrieve of a model the server does not have, the streamed text on one line, then
// "USAGE <completion_tokens> <prompt_tokens>" and "FINISH <finish_reason>". On an API error:
// "ERROR <status> <type> <message>", exit 2.
import OpenAI from 'openai';

const baseURL = process.env.SCD_OPENAI_BASE_URL;
if (!baseURL) {
  console.error('SCD_OPENAI_BASE_URL is not set');
  process.exit(1);
}
const client = new OpenAI({
  baseURL,
  apiKey: process.env.SCD_OPENAI_API_KEY || 'none',
  maxRetries: 0,
  timeout: 30000,
});

const modelName = process.env.SCD_OPENAI_MODEL || 'fake-model';
try {
  const model = await client.models.retrieve(modelName);
  console.log(`MODEL ${model.id} ${model.object}`);
  try {
    await client.models.retrieve(`${modelName}-missing`);
    console.log('MISSING none');
  } catch (err) {
    if (!(err instanceof OpenAI.APIError) || err.status === 401) throw err;
    console.log(`MISSING ${err.status}`);
  }
  const stream = await client.chat.completions.create({
    model: modelName,
    messages: [
      { role: 'system', content: 'You tell short stories.' },
      { role: 'user', content: 'Once upon a time' },
    ],
    max_tokens: Number(process.env.SCD_OPENAI_MAX_TOKENS || 8),
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta?.content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  console.log(text);
  console.log(`USAGE ${usage?.completion_tokens} ${usage?.prompt_tokens}`);
  console.log(`FINISH ${finish}`);
} catch (err) {
  if (err instanceof OpenAI.APIError) {
    console.log(`ERROR ${err.status} ${err.type} ${err.message}`);
    process.exit(2);
  }
  throw err;
}
