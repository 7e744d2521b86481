"""The harness protocol, checked on this side too.

`protocol.json` beside this file is generated from the Rust types (crates/crucible-judge/src/
protocol.rs) and checked in; a Rust test fails when the two drift apart. Each process checks every
request it receives and every reply it sends against it, so a field renamed on either side fails
loudly in the first test that sends it, instead of switching a check off with a default.

The checker understands the part of JSON Schema that the Rust side generates: `$ref` into `$defs`,
`type` (one or a list), `properties`, `required`, `additionalProperties: false`, `items`,
`minItems`/`maxItems`, `oneOf`, `const`, `enum` and `minimum`.
"""

import json
import os


class ProtocolError(Exception):
    """A message that does not fit the protocol."""


_DOCUMENT = None


def document():
    global _DOCUMENT
    if _DOCUMENT is None:
        with open(os.path.join(os.path.dirname(__file__), "protocol.json"), encoding="utf-8") as f:
            _DOCUMENT = json.load(f)
    return _DOCUMENT


def check_request(side, msg):
    """Raises ProtocolError unless `msg` is a request `side` (referee, candidate, audit) accepts."""
    validate(msg, document()[side]["request"])


def check_reply(side, op, reply):
    """Raises ProtocolError unless `reply` (with its `ok`) is what the judge accepts for `op`."""
    fields = {k: v for k, v in reply.items() if k != "ok"}
    if reply.get("ok") is True:
        schema = document()[side]["replies"].get(op)
        if schema is None:
            raise ProtocolError(f"no reply is defined for op {op!r}")
    else:
        schema = document()[side]["failure"]
    validate(fields, schema)


def validate(value, schema, root=None, path="$"):
    root = root or schema
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        schema = {**root["$defs"][name], **{k: v for k, v in schema.items() if k != "$ref"}}
    if "oneOf" in schema and isinstance(value, dict) and all(_op(o) for o in schema["oneOf"]):
        # A request: the variant is named by its `op`.
        by_op = {_op(o): o for o in schema["oneOf"]}
        if value.get("op") not in by_op:
            raise ProtocolError(f"{path}: unknown op {value.get('op')!r} (known: {', '.join(sorted(by_op))})")
        return validate(value, by_op[value["op"]], root, path)
    if "oneOf" in schema:
        errors = []
        for option in schema["oneOf"]:
            try:
                validate(value, option, root, path)
                return
            except ProtocolError as exc:
                errors.append(str(exc))
        raise ProtocolError(f"{path}: fits none of the allowed shapes ({'; '.join(errors)})")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, t) for t in types):
            raise ProtocolError(f"{path}: expected {' or '.join(types)}, got {type(value).__name__} {value!r:.80}")
    if "const" in schema and value != schema["const"]:
        raise ProtocolError(f"{path}: expected {schema['const']!r}, got {value!r:.80}")
    if "enum" in schema and value not in schema["enum"]:
        raise ProtocolError(f"{path}: expected one of {schema['enum']}, got {value!r:.80}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        raise ProtocolError(f"{path}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise ProtocolError(f"{path}: missing field(s) {', '.join(missing)}")
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in properties]
            if extra:
                raise ProtocolError(f"{path}: unexpected field(s) {', '.join(extra)}")
        for key, sub in properties.items():
            if key in value:
                validate(value[key], sub, root, f"{path}.{key}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise ProtocolError(f"{path}: needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise ProtocolError(f"{path}: allows at most {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                validate(item, schema["items"], root, f"{path}[{i}]")


def _op(schema):
    return schema.get("properties", {}).get("op", {}).get("const")


def _is(value, kind):
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    raise ProtocolError(f"the schema names an unknown type {kind!r}")
