// tests/peers/encode.mjs — encode documents with a reference tokenizer and
// write the token stream titan-tokenize writes, so that the two can be
// compared with cmp.
//
//   node encode.mjs [--peer tiktoken|gpt-tokenizer|hf|hf-js|llama3-js]
//                   [--vocab FILE | --tokenizer FILE] [--encoding NAME]
//                   [--allow-special] [--format jsonl|text|lines] [--field NAME]
//                   [--jsonl FIELD] [--doc-per-line] [--no-bos] [--no-eos]
//                   [--time] [INPUT...]
//   node encode.mjs --decode [--peer ...] [--vocab FILE] [--encoding NAME] [STREAM...]
//
// Output: per document [BOS] ids [EOS] as uint32 little-endian on stdout
// (DESIGN.md's token stream).  BOS/EOS per encoding, see peers.mjs
// (cl100k_base/o200k_base/gpt2: EOS <|endoftext|> only; llama3: BOS 128000,
// EOS 128001).  No INPUT or "-" reads stdin.  --peer defaults to tiktoken;
// with --encoding alone the files made by setup.sh in build/cache/peers/cache are used.
//
// Reading input, the rules titan-tokenize follows:
//   - every input is decoded as UTF-8 with the WHATWG decoder (TextDecoder,
//     fatal=false): each maximal invalid subpart becomes U+FFFD.  A leading
//     byte-order mark is kept as text (ignoreBOM), as Python's bytes.decode
//     would.
//   - --format jsonl (default): one JSON object per line (lines split at
//     "\n"; a line of only spaces/tabs/CR is skipped); the document is the
//     string field --field (default "text").  A line that is not a JSON
//     object, or lacks the field as a string, is an error naming FILE:LINE.
//     The whole line is decoded (U+FFFD) before JSON parsing, so raw invalid
//     UTF-8 inside a JSON string is replaced, not an error.  A JSON
//     \uD800-style lone surrogate ends up as U+FFFD: tiktoken's and HF's
//     bindings convert JS strings to UTF-8 that way.
//   - --format text: each input file is one document, whatever it holds
//     (an empty file is an empty document: BOS EOS).
//   - --doc-per-line (implies --format text; titan's --format lines): each
//     line is a document, without its "\n" terminator and without one "\r"
//     before it; an empty line is an empty document (BOS EOS); a last line
//     without "\n" counts, a final "\n" does not start another document.
//
// --time prints on stderr the time spent inside the peer's encode calls only
// (no reading, decoding UTF-8 or writing), as
//   peer=tiktoken encoding=cl100k_base docs=N bytes=B tokens=T encode_s=S MBps=X
// with MB = 1e6 bytes of UTF-8 text fed to the peer.
//
// --decode reads token streams and writes the bytes of every id (special
// tokens, BOS and EOS included, as their text) on stdout.
import fs from 'node:fs';
import os from 'node:os';
import { once } from 'node:events';
import { loadPeer, PeerError } from './peers.mjs';

const USAGE = `usage: node encode.mjs [--peer tiktoken|gpt-tokenizer|hf|hf-js|llama3-js]
       [--vocab FILE] [--encoding cl100k_base|o200k_base|llama3|gpt2] [--allow-special]
       [--format jsonl|text|lines] [--field NAME] [--jsonl FIELD] [--doc-per-line]
       [--no-bos] [--no-eos] [--time] [INPUT...]
   or: node encode.mjs --decode [--peer P] [--vocab FILE] [--encoding NAME] [STREAM...]
`;

function die(msg, status = 1) {
	process.stderr.write(`encode.mjs: error: ${msg}\n`);
	if (status === 2) process.stderr.write(USAGE);
	process.exit(status);
}

function parseArgs(argv) {
	const o = {
		peer: 'tiktoken', vocab: null, encoding: null, allowSpecial: false, format: 'jsonl',
		field: 'text', docPerLine: false, bos: true, eos: true, time: false, decode: false, inputs: [],
	};
	const needs = (i) => {
		if (i + 1 >= argv.length) die(`option '${argv[i]}' needs a value`, 2);
		return argv[i + 1];
	};
	for (let i = 0; i < argv.length; i++) {
		let a = argv[i];
		let inlineValue = null;
		const eq = a.indexOf('=');
		if (a.startsWith('--') && eq > 0) {
			inlineValue = a.slice(eq + 1);
			a = a.slice(0, eq);
		}
		const value = () => {
			if (inlineValue !== null) return inlineValue;
			return needs(i++);
		};
		switch (a) {
		case '--peer': o.peer = value(); break;
		case '--vocab': case '--tokenizer': o.vocab = value(); break;
		case '--encoding': o.encoding = value(); break;
		case '--allow-special': o.allowSpecial = true; break;
		case '--format': o.format = value(); break;
		case '--field': o.field = value(); break;
		case '--jsonl': o.format = 'jsonl'; o.field = value(); break;
		case '--doc-per-line': o.format = 'lines'; break;
		case '--no-bos': o.bos = false; break;
		case '--no-eos': o.eos = false; break;
		case '--time': o.time = true; break;
		case '--decode': o.decode = true; break;
		case '-h': case '--help': process.stdout.write(USAGE); process.exit(0); break;
		case '--': o.inputs.push(...argv.slice(i + 1)); i = argv.length; break;
		default:
			if (a.startsWith('-') && a !== '-') die(`unknown option '${argv[i]}'`, 2);
			o.inputs.push(argv[i]);
		}
	}
	if (o.format === 'lines') {
		o.format = 'text';
		o.docPerLine = true;
	}
	if (!['jsonl', 'text'].includes(o.format)) die(`--format must be jsonl, text or lines, not '${o.format}'`, 2);
	if (o.inputs.length === 0) o.inputs.push('-');
	return o;
}

function readInput(name) {
	try {
		return name === '-' ? fs.readFileSync(0) : fs.readFileSync(name);
	} catch (e) {
		die(`cannot open '${name}': ${e.code === 'ENOENT' ? 'No such file or directory' : e.message}`);
	}
}

// The WHATWG decoder: maximal subparts -> U+FFFD; BOM kept.
const utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

function* documents(o, name, bytes) {
	const text = utf8.decode(bytes);
	const label = name === '-' ? '<stdin>' : name;
	if (o.format === 'text' && !o.docPerLine) {
		yield text;
		return;
	}
	const lines = text.split('\n');
	if (lines[lines.length - 1] === '') lines.pop(); // the text ended with "\n"
	for (let i = 0; i < lines.length; i++) {
		let line = lines[i];
		if (o.docPerLine) {
			if (line.endsWith('\r')) line = line.slice(0, -1);
			yield line;
			continue;
		}
		if (/^[ \t\r]*$/.test(line)) continue;
		let obj;
		try {
			obj = JSON.parse(line);
		} catch (e) {
			die(`${label}:${i + 1}: not JSON: ${e.message}`);
		}
		if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) die(`${label}:${i + 1}: not a JSON object`);
		if (typeof obj[o.field] !== 'string') die(`${label}:${i + 1}: no string field '${o.field}'`);
		yield obj[o.field];
	}
}

// Buffered little-endian uint32 writer on stdout (waits for 'drain').
class StreamOut {
	constructor() {
		this.buf = new Uint32Array(1 << 18);
		this.n = 0;
		this.swap = os.endianness() !== 'LE';
	}
	async flush() {
		if (!this.n) return;
		const out = Buffer.from(this.buf.buffer.slice(0, this.n * 4));
		if (this.swap) out.swap32();
		this.n = 0;
		if (!process.stdout.write(out)) await once(process.stdout, 'drain');
	}
	async push(id) {
		if (this.n === this.buf.length) await this.flush();
		this.buf[this.n++] = id;
	}
	async pushAll(ids) {
		for (let i = 0; i < ids.length; i++) {
			if (this.n === this.buf.length) await this.flush();
			this.buf[this.n++] = ids[i];
		}
	}
}

async function encodeMain(o, peer) {
	const out = new StreamOut();
	let docs = 0, bytes = 0, tokens = 0;
	let ns = 0n;
	for (const name of o.inputs) {
		const data = readInput(name);
		for (const doc of documents(o, name, data)) {
			const t0 = process.hrtime.bigint();
			const ids = await peer.encode(doc, o.allowSpecial);
			ns += process.hrtime.bigint() - t0;
			if (o.time) bytes += Buffer.byteLength(doc, 'utf8');
			docs++;
			tokens += ids.length;
			if (o.bos && peer.bos >= 0) await out.push(peer.bos);
			await out.pushAll(ids);
			if (o.eos && peer.eos >= 0) await out.push(peer.eos);
		}
	}
	await out.flush();
	if (o.time) {
		const s = Number(ns) / 1e9;
		process.stderr.write(`peer=${peer.name} encoding=${peer.encoding ?? '-'} docs=${docs} bytes=${bytes} ` +
			`tokens=${tokens} encode_s=${s.toFixed(3)} MBps=${(bytes / 1e6 / s).toFixed(2)}\n`);
	}
}

async function decodeMain(o, peer) {
	for (const name of o.inputs) {
		const data = readInput(name);
		if (data.length % 4) die(`${name}: ${data.length} bytes is not a whole number of uint32 ids`);
		const ids = new Uint32Array(data.length / 4);
		const dv = new DataView(data.buffer, data.byteOffset, data.length);
		for (let i = 0; i < ids.length; i++) ids[i] = dv.getUint32(4 * i, true);
		const bytes = await peer.decode(ids);
		if (!process.stdout.write(bytes)) await once(process.stdout, 'drain');
	}
}

const o = parseArgs(process.argv.slice(2));
process.stdout.on('error', (e) => die(`writing stdout: ${e.message}`));
try {
	const peer = await loadPeer({ peer: o.peer, vocab: o.vocab, encoding: o.encoding });
	await (o.decode ? decodeMain(o, peer) : encodeMain(o, peer));
} catch (e) {
	if (e instanceof PeerError) die(e.message);
	throw e;
}
