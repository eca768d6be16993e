// The README's main command: `ernie serve` with no --model serves the small trained model
// that ships in models/, and it answers in recognisably English (KJV) text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

// Frequent words of the King James Bible; a model that learned the text uses them.
const kjvWords = new Set(['the', 'and', 'of', 'to', 'that', 'in', 'he', 'shall', 'unto', 'for', 'i', 'his', 'a',
                          'lord', 'they', 'be', 'is', 'him', 'not', 'them', 'it', 'with', 'all', 'thou', 'thy', 'was',
                          'god', 'which', 'my', 'me', 'said', 'but', 'ye', 'their', 'have', 'will', 'thee', 'from', 'as',
                          'are', 'when', 'this', 'out', 'were', 'upon', 'man', 'by', 'you', 'israel', 'king', 'up', 'there',
                          'hath', 'then', 'people', 'came', 'had', 'house', 'into', 'on', 'her', 'come', 'one', 'we', 'children',
                          's', 'before', 'your', 'also', 'day', 'land', 'so', 'men', 'against', 'shalt', 'if', 'at', 'let', 'go']);

test('ernie serve without --model answers in English', async () => {
  const server = await startServer([], {}, { model: null, maxModelLen: null });
  try {
    assert.match(server.output(), /no --model: serving the shipped ernie-4.5-kjv-dense/);
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.baseURL}/v1` });
    const models = await client.models.list();
    assert.equal(models.data[0].id, 'ernie-4.5-kjv-dense');
    const completion = await client.completions.create({ model: 'ernie-4.5-kjv-dense', prompt: 'And God said', max_tokens: 48,
                                                         temperature: 0.7, top_p: 0.9, seed: 1 });
    const words = completion.choices[0].text.toLowerCase().match(/[a-z]+/g) ?? [];
    assert.ok(words.length >= 20, `too few words: ${completion.choices[0].text}`);
    const known = words.filter((word) => kjvWords.has(word)).length;
    assert.ok(known / words.length >= 0.4, `${known} of ${words.length} words are common KJV words: ${completion.choices[0].text}`);
    const chat = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'Who made the heaven?' }],
                                                        max_tokens: 24, temperature: 0 });
    assert.ok(chat.choices[0].message.content.length > 0);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
