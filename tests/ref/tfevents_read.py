#!/usr/bin/env python3
"""tfevents_read.py — a reader of TensorBoard event files written from the
specs, the independent reader titan's writer (lib/trace/tfevents.c) is
checked against.  It shares no code with titan.

  * the TFRecord framing (tensorflow/core/lib/io/record_writer.cc): u64
    length, u32 masked CRC32C of the length bytes, the data, u32 masked
    CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8;
    CRC32C (Castagnoli) computed here from its definition;
  * the data: tensorflow.Event messages (tensorflow/core/util/event.proto,
    summary.proto), decoded by Debian's python3-protobuf from message
    classes built at run time from descriptors (no protoc, no TensorFlow).

    import tfevents_read
    events = tfevents_read.load("events.out.tfevents....")
    events[0].file_version                  # "brain.Event:2"
    events[1].step, events[1].wall_time
    tfevents_read.scalars(events)           # {step: {tag: value}}

    python3 tests/ref/tfevents_read.py FILE   # one JSON object per event

load() raises ValueError naming the byte offset for a short record, a bad
length or data CRC, or data that is not an Event; and, with canonical=True
(the default), when the bytes differ from protobuf's own serialization of
the decoded message (fields out of order, non-minimal varints, defaults
written out).
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, message_factory

_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _messages():
    """Event and Summary as event.proto / summary.proto declare the fields
    titan writes (field numbers and types from the .proto files)."""
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="titan_test_event.proto",
                                            package="tensorflow", syntax="proto3")

    def field(msg, name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof
        return f

    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "node_name", 7, F.TYPE_STRING)
    field(value, "tag", 1, F.TYPE_STRING)
    field(value, "simple_value", 2, F.TYPE_FLOAT, oneof=0)
    field(summary, "value", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tensorflow.Summary.Value")
    event = fd.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    field(event, "file_version", 3, F.TYPE_STRING, oneof=0)
    field(event, "graph_def", 4, F.TYPE_BYTES, oneof=0)
    field(event, "summary", 5, F.TYPE_MESSAGE, type_name=".tensorflow.Summary", oneof=0)
    classes = message_factory.GetMessages([fd])
    return classes["tensorflow.Event"], classes["tensorflow.Summary"]


Event, Summary = _messages()


def records(data):
    """The data of every record, checking the framing and both CRCs."""
    out, at = [], 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"byte {at}: {len(data) - at} bytes left, a record header is 12")
        (n,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        if lcrc != masked_crc32c(data[at:at + 8]):
            raise ValueError(f"byte {at}: length CRC {lcrc:08x} != {masked_crc32c(data[at:at + 8]):08x}")
        if len(data) - at - 12 < n + 4:
            raise ValueError(f"byte {at}: record of {n} bytes runs past the end of the file")
        body = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        if dcrc != masked_crc32c(body):
            raise ValueError(f"byte {at}: data CRC {dcrc:08x} != {masked_crc32c(body):08x}")
        out.append((at, body))
        at += 12 + n + 4
    return out


def load(path, canonical=True):
    with open(path, "rb") as f:
        data = f.read()
    events = []
    for at, body in records(data):
        ev = Event()
        try:
            ev.ParseFromString(body)
        except Exception as e:  # google.protobuf.message.DecodeError
            raise ValueError(f"byte {at}: not an Event: {e}") from e
        if canonical and ev.SerializeToString(deterministic=True) != body:
            raise ValueError(f"byte {at}: not protobuf's encoding of the same Event")
        events.append(ev)
    return events


def scalars(events):
    """{step: {tag: simple_value}} of the summary events."""
    out = {}
    for ev in events:
        if ev.WhichOneof("what") == "summary":
            d = out.setdefault(ev.step, {})
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    raise ValueError(f"step {ev.step}: {v.tag} is not a simple_value")
                d[v.tag] = v.simple_value
    return out


if __name__ == "__main__":
    for ev in load(sys.argv[1]):
        o = {"wall_time": ev.wall_time, "step": ev.step}
        if ev.WhichOneof("what") == "file_version":
            o["file_version"] = ev.file_version
        else:
            o["scalars"] = {v.tag: v.simple_value for v in ev.summary.value}
        print(json.dumps(o))
