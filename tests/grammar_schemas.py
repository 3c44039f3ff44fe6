"""Twenty JSON schemas for the constrained-decoding tests: nested objects, arrays, enums, numbers,
strings with formats. Strings and arrays are bounded so a model that writes noise (the fake one)
still finishes inside a test's token budget."""

S = {"type": "string", "maxLength": 12}

SCHEMAS: dict[str, dict] = {
    "flat": {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
             "required": ["name", "age"], "additionalProperties": False},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
             "required": ["color"], "additionalProperties": False},
    "bool_null": {"type": "object", "properties": {"ok": {"type": "boolean"}, "why": {"type": "null"}},
                  "required": ["ok", "why"], "additionalProperties": False},
    "number": {"type": "object", "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10}},
               "required": ["x"], "additionalProperties": False},
    "int_array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 5},
    "str_array": {"type": "array", "items": S, "minItems": 1, "maxItems": 3},
    "nested": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9999}, "name": S},
                 "required": ["id", "name"], "additionalProperties": False},
        "active": {"type": "boolean"}}, "required": ["user", "active"], "additionalProperties": False},
    "array_of_objects": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"k": S, "v": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["k", "v"], "additionalProperties": False}},
    "date": {"type": "object", "properties": {"when": {"type": "string", "format": "date"}},
             "required": ["when"], "additionalProperties": False},
    "email": {"type": "object", "properties": {"to": {"type": "string", "format": "email", "maxLength": 30}},
              "required": ["to"], "additionalProperties": False},
    "uuid": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}},
             "required": ["id"], "additionalProperties": False},
    "pattern": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["zip"], "additionalProperties": False},
    "const": {"type": "object", "properties": {"version": {"const": 2}, "kind": {"const": "report"}},
              "required": ["version", "kind"], "additionalProperties": False},
    "anyof": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                                                  {"enum": ["none", "many"]}]}},
              "required": ["value"], "additionalProperties": False},
    "ref": {"type": "object", "$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}},
        "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
        "required": ["a", "b"], "additionalProperties": False},
    "optional": {"type": "object", "properties": {"title": S, "note": S}, "required": ["title"],
                 "additionalProperties": False},
    "enum_array": {"type": "array", "items": {"enum": ["low", "mid", "high"]}, "minItems": 2, "maxItems": 4},
    "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "c": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}}, "required": ["c"],
        "additionalProperties": False}}, "required": ["b"], "additionalProperties": False}},
        "required": ["a"], "additionalProperties": False},
    "extraction": {"type": "object", "properties": {
        "invoice": {"type": "string", "pattern": "^INV-[0-9]{4}$"}, "total": {"type": "number", "minimum": 0, "maximum": 1000},
        "currency": {"enum": ["EUR", "USD", "GBP"]}, "paid": {"type": "boolean"},
        "items": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
            "sku": S, "qty": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["sku", "qty"],
            "additionalProperties": False}}},
        "required": ["invoice", "total", "currency", "paid", "items"], "additionalProperties": False},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["a", "b"]}],
              "items": False, "minItems": 2},
}
