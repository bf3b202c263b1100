// gguf.mjs FILE.gguf — parse a GGUF file with @huggingface/gguf (npm; the
// parser the Hugging Face Hub runs on uploaded GGUF files) and print one JSON
// object in the shape tests/ref/gguf_read.py prints: version, data_offset,
// metadata {key: {type, value}} (arrays in full), tensors [{name, type, ne,
// offset}].  titan-ckpt-convert.bats compares the two.
import path from 'node:path';
import { gguf, GGUFValueType, GGMLQuantizationType } from '@huggingface/gguf';

const names = {
	[GGUFValueType.UINT8]: 'u8', [GGUFValueType.INT8]: 'i8', [GGUFValueType.UINT16]: 'u16',
	[GGUFValueType.INT16]: 'i16', [GGUFValueType.UINT32]: 'u32', [GGUFValueType.INT32]: 'i32',
	[GGUFValueType.FLOAT32]: 'f32', [GGUFValueType.BOOL]: 'bool', [GGUFValueType.STRING]: 'string',
	[GGUFValueType.ARRAY]: 'array', [GGUFValueType.UINT64]: 'u64', [GGUFValueType.INT64]: 'i64',
	[GGUFValueType.FLOAT64]: 'f64',
};

const num = (v) => {
	if (typeof v !== 'bigint') return v;
	if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${v}: too big for JSON`);
	return Number(v);
};

const file = process.argv[2];
if (!file) {
	console.error('usage: node tests/peers/gguf.mjs FILE.gguf');
	process.exit(2);
}
const r = await gguf(path.resolve(file), { allowLocalFile: true, typedMetadata: true });
if (!r.littleEndian) throw new Error('parsed as big-endian');
const metadata = {};
for (const [key, tv] of Object.entries(r.typedMetadata)) {
	if (key === 'version' || key === 'tensor_count' || key === 'kv_count') continue;
	const type = tv.type === GGUFValueType.ARRAY ? `array[${names[tv.subType]}]` : names[tv.type];
	const value = Array.isArray(tv.value) ? tv.value.map(num) : num(tv.value);
	metadata[key] = { type, value };
}
const out = {
	version: r.metadata.version,
	tensor_count: num(r.metadata.tensor_count),
	kv_count: num(r.metadata.kv_count),
	data_offset: num(r.tensorDataOffset),
	metadata,
	tensors: r.tensorInfos.map((t) => ({
		name: t.name, type: GGMLQuantizationType[t.dtype], ne: t.shape.map(num), offset: num(t.offset),
	})),
};
process.stdout.write(JSON.stringify(out) + '\n');
