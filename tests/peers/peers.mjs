// tests/peers/peers.mjs — one interface over the reference tokenizers that
// titan-tokenize is checked against (used by encode.mjs and vocab.mjs).
//
//   const p = await loadPeer({ peer, vocab, encoding });
//   p.encode(text, allowSpecial) -> Promise<ArrayLike<number>>   ids, no BOS/EOS
//   p.decode(ids)                -> Promise<Uint8Array>           bytes
//   p.bos, p.eos                 -> id or -1
//   p.encoding                   -> 'cl100k_base' | 'o200k_base' | 'llama3' | 'gpt2' | null
//
// Peers:
//   tiktoken       the `tiktoken` npm package: OpenAI's Rust core compiled to
//                  WASM.  Reads any tiktoken file ("base64 rank" lines); the
//                  pattern and special tokens come from the encoding, as in
//                  titan (lib/titan/tok.h): cl100k_base, o200k_base, gpt2
//                  (r50k) from the package's own tables; llama3 = cl100k's
//                  pattern, N ranks, 256 specials N.. with Meta's names.
//   gpt-tokenizer  pure-JS port with its own bundled ranks (cl100k/o200k/gpt2);
//                  --vocab must then be the published file (sha256 checked).
//   hf             `tokenizers`: HuggingFace tokenizers' Rust core (the
//                  bindings/node crate, N-API), reads tokenizer.json.
//   hf-js          `@huggingface/tokenizers`: transformers.js' pure-JS port.
//   llama3-js      llama3-tokenizer-js (Llama 3 only; its special tokens use
//                  HF's Llama 3.1 names).
//
// Special tokens: allowSpecial=false treats special-token text as ordinary
// text (tiktoken's encode_ordinary); for tokenizer.json peers this loads the
// file with its added_tokens removed.  allowSpecial=true turns every special
// token's text into its id (tiktoken's allowed_special="all", HF's added tokens).
//
// BOS/EOS: cl100k_base/o200k_base/gpt2: no BOS, EOS <|endoftext|>; llama3:
// BOS N (<|begin_of_text|>), EOS N+1 (<|end_of_text|>).  tokenizer.json: BOS
// is the added token <|begin_of_text|> or <s>, EOS <|end_of_text|>,
// <|endoftext|> or </s>, when present (-1 otherwise).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
export const PEERS_DIR = path.dirname(fileURLToPath(import.meta.url));
export const CACHE_DIR = path.join(PEERS_DIR, 'cache');
// Where an installed package lives (some packages do not export package.json).
export const pkgDir = (name) => path.join(PEERS_DIR, 'node_modules', name);

export class PeerError extends Error {}
const fail = (msg) => {
	throw new PeerError(msg);
};

const PUBLISHED_SHA256 = {
	cl100k_base: '223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7',
	o200k_base: '446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d',
	gpt2: '306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930',
	llama3: '82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55',
};
export const ENCODINGS = ['cl100k_base', 'o200k_base', 'llama3', 'gpt2'];
const DEFAULT_FILES = {
	tiktoken: { cl100k_base: 'cl100k_base.tiktoken', o200k_base: 'o200k_base.tiktoken', llama3: 'llama3.tiktoken', gpt2: 'r50k_base.tiktoken' },
	json: { llama3: 'llama3-tokenizer.json', o200k_base: 'o200k-tokenizer.json', gpt2: 'gpt2-tokenizer.json' },
};

function tiktokenTable(name) {
	const file = { cl100k_base: 'cl100k_base', o200k_base: 'o200k_base', gpt2: 'gpt2' }[name];
	return JSON.parse(fs.readFileSync(path.join(pkgDir('tiktoken'), 'encoders', `${file}.json`), 'utf8'));
}

// Meta's Llama 3 special tokens after N ranks (the convention of tok.h).
export function llama3Specials(n) {
	const names = [
		'<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>',
		'<|reserved_special_token_1|>', '<|finetune_right_pad_id|>', '<|step_id|>',
		'<|start_header_id|>', '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>', '<|python_tag|>',
	];
	for (let k = 2; names.length < 256; k++) names.push(`<|reserved_special_token_${k}|>`);
	return Object.fromEntries(names.map((s, i) => [s, n + i]));
}

function countRanks(text) {
	let n = 0;
	for (const line of text.split('\n')) if (line.length) n++;
	return n;
}

function defaultFile(kind, encoding) {
	const name = DEFAULT_FILES[kind][encoding];
	if (!name) fail(`no default ${kind === 'json' ? 'tokenizer.json' : 'tiktoken file'} for encoding '${encoding}'`);
	const file = path.join(CACHE_DIR, name);
	if (!fs.existsSync(file)) fail(`${file} is missing: run tests/peers/setup.sh`);
	return file;
}

async function tiktokenPeer(vocab, encoding) {
	const { Tiktoken } = await import('tiktoken/lite');
	if (!vocab) vocab = defaultFile('tiktoken', encoding ?? fail('give --vocab FILE or --encoding NAME'));
	const text = fs.readFileSync(vocab, 'latin1');
	const n = countRanks(text);
	if (!encoding) encoding = n === 100256 ? 'cl100k_base' : n === 199998 ? 'o200k_base' : 'llama3';
	let pat, specials, bos = -1, eos;
	if (encoding === 'llama3') {
		pat = tiktokenTable('cl100k_base').pat_str;
		specials = llama3Specials(n);
		bos = n;
		eos = n + 1;
	} else {
		const table = tiktokenTable(encoding);
		pat = table.pat_str;
		specials = table.special_tokens;
		eos = specials['<|endoftext|>'];
	}
	let enc;
	try {
		enc = new Tiktoken(text, specials, pat);
	} catch (e) {
		fail(`${vocab}: tiktoken cannot load it: ${e.message ?? e}`);
	}
	return {
		name: 'tiktoken', encoding, bos, eos,
		encode: async (s, allow) => (allow ? enc.encode(s, 'all') : enc.encode_ordinary(s)),
		decode: async (ids) => enc.decode(Uint32Array.from(ids)),
		free: () => enc.free(),
	};
}

async function gptTokenizerPeer(vocab, encoding) {
	if (!encoding) {
		if (!vocab) fail('give --vocab FILE or --encoding NAME');
		const sum = crypto.createHash('sha256').update(fs.readFileSync(vocab)).digest('hex');
		encoding = Object.keys(PUBLISHED_SHA256).find((k) => PUBLISHED_SHA256[k] === sum);
	}
	const module = { cl100k_base: 'cl100k_base', o200k_base: 'o200k_base', gpt2: 'r50k_base' }[encoding];
	if (!module) fail(`gpt-tokenizer has no encoding '${encoding}' (it has cl100k_base, o200k_base, gpt2)`);
	if (vocab) {
		const sum = crypto.createHash('sha256').update(fs.readFileSync(vocab)).digest('hex');
		if (sum !== PUBLISHED_SHA256[encoding])
			fail(`${vocab}: gpt-tokenizer uses its own ${encoding} ranks; this file is not the published one`);
	}
	const api = await import(`gpt-tokenizer/encoding/${module}`);
	const eos = tiktokenTable(encoding).special_tokens['<|endoftext|>'];
	const none = new Set();
	return {
		name: 'gpt-tokenizer', encoding, bos: -1, eos,
		// gpt-tokenizer 4.0.0 finds an allowed special token only where its
		// sticky (/y) special-token regex starts, i.e. at the start of the text
		// or right after another special token: with allowedSpecial it is not a
		// faithful peer, so it is used for ordinary text only.
		encode: async (s, allow) => {
			if (allow) fail('gpt-tokenizer 4.0.0 misses allowed special tokens that are not at the start of the text; use --peer tiktoken with --allow-special');
			return api.encode(s, { allowedSpecial: none, disallowedSpecial: none });
		},
		decode: async (ids) => new TextEncoder().encode(api.decode(ids)),
	};
}

function readTokenizerJson(vocab, encoding) {
	if (!vocab) vocab = defaultFile('json', encoding ?? fail('give --vocab tokenizer.json or --encoding NAME'));
	const text = fs.readFileSync(vocab, 'utf8');
	let json;
	try {
		json = JSON.parse(text);
	} catch (e) {
		fail(`${vocab}: not JSON: ${e.message}`);
	}
	const added = new Map((json.added_tokens ?? []).map((t) => [t.content, t.id]));
	const pick = (...names) => {
		for (const s of names) if (added.has(s)) return added.get(s);
		return -1;
	};
	const stripped = { ...json, added_tokens: [] };
	return {
		vocab, json, text, stripped,
		bos: pick('<|begin_of_text|>', '<s>'),
		eos: pick('<|end_of_text|>', '<|endoftext|>', '</s>'),
	};
}

async function hfPeer(vocab, encoding) {
	const { Tokenizer } = require('tokenizers');
	const t = readTokenizerJson(vocab, encoding);
	let full, plain;
	try {
		full = Tokenizer.fromString(t.text);
		plain = Tokenizer.fromString(JSON.stringify(t.stripped));
	} catch (e) {
		fail(`${t.vocab}: HF tokenizers cannot load it: ${e.message ?? e}`);
	}
	return {
		name: 'hf', encoding: encoding ?? null, bos: t.bos, eos: t.eos,
		encode: async (s, allow) => (await (allow ? full : plain).encode(s, null, { addSpecialTokens: false })).getIds(),
		// Batch form (native threads); same ids as encode() one by one.
		encodeBatch: async (list, allow) =>
			(await (allow ? full : plain).encodeBatch(list, { addSpecialTokens: false })).map((e) => e.getIds()),
		decode: async (ids) => new TextEncoder().encode(await full.decode(Array.from(ids), false)),
	};
}

async function hfJsPeer(vocab, encoding) {
	const { Tokenizer } = await import('@huggingface/tokenizers');
	const t = readTokenizerJson(vocab, encoding);
	const full = new Tokenizer(t.json, {});
	const plain = new Tokenizer(t.stripped, {});
	return {
		name: 'hf-js', encoding: encoding ?? null, bos: t.bos, eos: t.eos,
		encode: async (s, allow) => (allow ? full : plain).encode(s, { add_special_tokens: false }).ids,
		decode: async (ids) => new TextEncoder().encode(full.decode(Array.from(ids), { skip_special_tokens: false })),
	};
}

async function llama3JsPeer(vocab, encoding) {
	if (encoding && encoding !== 'llama3') fail(`llama3-js knows only the llama3 encoding, not '${encoding}'`);
	if (vocab) {
		const sum = crypto.createHash('sha256').update(fs.readFileSync(vocab)).digest('hex');
		if (sum !== PUBLISHED_SHA256.llama3) fail(`${vocab}: llama3-js has Llama 3's vocabulary built in; this file is not it`);
	}
	const tok = (await import('llama3-tokenizer-js')).default;
	const never = /(?!)/g;
	return {
		name: 'llama3-js', encoding: 'llama3', bos: 128000, eos: 128001,
		encode: async (s, allow) => tok.encode(s, { bos: false, eos: false, specialTokenRegex: allow ? undefined : never }),
		decode: async (ids) => new TextEncoder().encode(tok.decode(Array.from(ids))),
	};
}

export async function loadPeer({ peer, vocab, encoding }) {
	if (encoding && !ENCODINGS.includes(encoding)) fail(`unknown encoding '${encoding}' (${ENCODINGS.join(', ')})`);
	if (vocab && !fs.existsSync(vocab)) fail(`cannot open '${vocab}': No such file or directory`);
	switch (peer) {
	case 'tiktoken': return tiktokenPeer(vocab, encoding);
	case 'gpt-tokenizer': return gptTokenizerPeer(vocab, encoding);
	case 'hf': return hfPeer(vocab, encoding);
	case 'hf-js': return hfJsPeer(vocab, encoding);
	case 'llama3-js': return llama3JsPeer(vocab, encoding);
	default: fail(`unknown peer '${peer}' (tiktoken, gpt-tokenizer, hf, hf-js, llama3-js)`);
	}
}
