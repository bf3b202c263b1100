// tests/peers/compare.mjs — compare two token streams (uint32 LE) and show
// where they first differ, with each token's bytes, so a failing cross-check
// says which text the tokenizers split differently.
//
//   node compare.mjs [--peer P] [--vocab FILE] [--encoding NAME] [--context N] A B
//
// Exit 0: identical; 1: they differ (report on stdout); 2: usage/IO error.
// Token bytes are decoded with the peer (default tiktoken) and shown as JSON
// strings (bytes that are not UTF-8 as \xNN).
import fs from 'node:fs';
import { loadPeer, PeerError } from './peers.mjs';

function die(msg) {
	process.stderr.write(`compare.mjs: error: ${msg}\n`);
	process.exit(2);
}

const args = process.argv.slice(2);
const o = { peer: 'tiktoken', vocab: null, encoding: null, context: 8, files: [] };
for (let i = 0; i < args.length; i++) {
	const a = args[i];
	const val = () => (i + 1 < args.length ? args[++i] : die(`option '${a}' needs a value`));
	if (a === '--peer') o.peer = val();
	else if (a === '--vocab' || a === '--tokenizer') o.vocab = val();
	else if (a === '--encoding') o.encoding = val();
	else if (a === '--context') o.context = Number(val());
	else if (a.startsWith('--')) die(`unknown option '${a}'`);
	else o.files.push(a);
}
if (o.files.length !== 2) die('usage: node compare.mjs [--peer P] [--vocab FILE] [--encoding NAME] [--context N] A B');

const read = (f) => {
	let b;
	try {
		b = fs.readFileSync(f);
	} catch (e) {
		die(`cannot open '${f}': ${e.message}`);
	}
	if (b.length % 4) die(`${f}: ${b.length} bytes is not a whole number of uint32 ids`);
	const v = new Uint32Array(b.length / 4);
	const dv = new DataView(b.buffer, b.byteOffset, b.length);
	for (let i = 0; i < v.length; i++) v[i] = dv.getUint32(4 * i, true);
	return v;
};
const [a, b] = o.files.map(read);
let i = 0;
const n = Math.min(a.length, b.length);
while (i < n && a[i] === b[i]) i++;
if (i === a.length && i === b.length) process.exit(0);

let peer = null;
try {
	peer = await loadPeer({ peer: o.peer, vocab: o.vocab, encoding: o.encoding });
} catch (e) {
	if (!(e instanceof PeerError)) throw e;
	process.stderr.write(`compare.mjs: note: cannot decode tokens: ${e.message}\n`);
}
const show = async (id) => {
	if (!peer) return `${id}`;
	let bytes;
	try {
		bytes = await peer.decode([id]);
	} catch {
		return `${id}(?)`;
	}
	let s = '';
	for (const ch of [...new TextDecoder('utf-8', { fatal: false }).decode(bytes)].entries()) s += ch;
	const valid = Buffer.from(s, 'utf8').equals(Buffer.from(bytes));
	const text = valid ? JSON.stringify(s) : `"${[...bytes].map((x) => (x < 0x80 && x >= 0x20 ? String.fromCharCode(x) : `\\x${x.toString(16).padStart(2, '0')}`)).join('')}"`;
	return `${id}:${text}`;
};
const side = async (v, name) => {
	const lo = Math.max(0, i - o.context), hi = Math.min(v.length, i + o.context);
	const parts = [];
	for (let k = lo; k < hi; k++) parts.push((k === i ? '>>' : '') + (await show(v[k])));
	return `${name} (${v.length} ids): ${lo > 0 ? '... ' : ''}${parts.join(' ')}${hi < v.length ? ' ...' : ''}`;
};
let bytesBefore = 0;
if (peer) bytesBefore = (await peer.decode(a.slice(0, i))).length;
process.stdout.write(`streams differ at id #${i} (after ${bytesBefore} bytes of decoded text)\n`);
process.stdout.write((await side(a, o.files[0])) + '\n');
process.stdout.write((await side(b, o.files[1])) + '\n');
process.exit(1);
