"""Op classes: which op types count as string work, parsing, copies, compute or other.

The release gate asks one question — how much of the op self time goes to string
handling — so the rules are explicit sets of op types as the profilers name them (TF op
types, `aten::` names, TensorRT layer names), plus keyword rules for free-form names such
as PyTorch `record_function` annotations. See docs/profiles.md for the table.
"""

from __future__ import annotations

from typing import Literal

OpClass = Literal["string", "parse", "memcpy", "compute", "other"]
OP_CLASSES: tuple[OpClass, ...] = ("string", "parse", "memcpy", "compute", "other")

# TF string kernels. `_TensorToHashBucketFast` is grappler's fusion of AsString +
# StringToHashBucketFast (the op *name* keeps saying StringToHashBucketFast).
STRING_OPS = frozenset({
    "AsString", "StringToHashBucket", "StringToHashBucketFast", "StringToHashBucketStrong",
    "_TensorToHashBucketFast", "StringFormat", "RegexReplace", "StaticRegexReplace",
    "RegexFullMatch", "StaticRegexFullMatch", "Substr", "StringSplit", "StringSplitV2",
    "StringJoin", "ReduceJoin", "StringStrip", "StringLower", "StringUpper", "StringLength",
    "StringNGrams", "StringToNumber", "UnicodeDecode", "UnicodeDecodeWithOffsets",
    "UnicodeEncode", "UnicodeScript", "UnicodeTranscode", "EncodeBase64", "DecodeBase64",
    "UnsortedSegmentJoin", "Fingerprint",
})
PARSE_OPS = frozenset({
    "ParseExample", "ParseExampleV2", "ParseSingleExample", "ParseSequenceExample",
    "ParseSequenceExampleV2", "ParseSingleSequenceExample", "ParseTensor", "DecodeCSV",
    "DecodeJSONExample", "DecodeRaw", "DecodePaddedRaw", "DecodeProtoV2", "DeserializeSparse",
    "DeserializeManySparse", "DecodeCompressed",
})
MEMCPY_OPS = frozenset({
    "MemcpyH2D", "MemcpyD2H", "MemcpyD2D", "MemcpyP2P", "_Send", "_Recv", "_HostSend", "_HostRecv",
    "CopyToDevice", "EagerCopyToDevice", "aten::copy_", "aten::_to_copy",
})
# Graph plumbing: no arithmetic of the model's own.
OTHER_OPS = frozenset({
    "NoOp", "Identity", "IdentityN", "Const", "ReadVariableOp", "VarHandleOp", "_Arg", "_Retval",
    "Placeholder", "StatefulPartitionedCall", "PartitionedCall", "Switch", "Merge", "Enter", "Exit",
    "NextIteration", "LoopCond", "aten::empty", "aten::empty_strided", "aten::view", "aten::detach",
    "aten::detach_", "aten::lift_fresh", "aten::as_strided", "aten::resolve_conj", "aten::resolve_neg",
})

# Free-form names (user annotations, unknown kernels): first matching keyword wins.
_KEYWORDS: tuple[tuple[OpClass, tuple[str, ...]], ...] = (
    ("string", ("as_string", "string", "hash", "regex", "tokeni", "str_", "unicode")),
    ("parse", ("parse", "decode", "deserializ", "json", "csv", "protobuf")),
    ("memcpy", ("memcpy", "copynode", "copy_to", "h2d", "d2h", "reformat")),
)
_MEMCPY_KEYWORDS = _KEYWORDS[-1][1]


def classify_op_type(op_type: str) -> OpClass:
    """Class of a framework op type (TF kernel type, `aten::` op, GPU kernel, TRT layer)."""
    if op_type in STRING_OPS:
        return "string"
    if op_type in PARSE_OPS:
        return "parse"
    if op_type in MEMCPY_OPS:
        return "memcpy"
    if op_type in OTHER_OPS:
        return "other"
    # Only copies are recognised by keyword here: a TensorRT layer called "decoder/MatMul"
    # is compute, not parsing.
    return "memcpy" if any(k in op_type.lower() for k in _MEMCPY_KEYWORDS) else "compute"


def classify_name(name: str) -> OpClass:
    """Class of a free-form name by keyword (user annotations): `other` when nothing matches."""
    lowered = name.lower()
    for op_class, keywords in _KEYWORDS:
        if any(k in lowered for k in keywords):
            return op_class
    return "other"
