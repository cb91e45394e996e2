"""Validates manifests against docs/manifest.schema.json with the `jsonschema` package:
SCHEMA MANIFEST... Prints one line per manifest: `valid PATH` or `invalid PATH: message`;
exits 1 if any is invalid."""
import json, sys

import jsonschema

schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
bad = 0
for path in sys.argv[2:]:
    errors = sorted(validator.iter_errors(json.load(open(path))), key=lambda e: list(e.path))
    if errors:
        bad += 1
        e = errors[0]
        print(f"invalid {path}: {'/'.join(map(str, e.path))}: {e.message}")
    else:
        print(f"valid {path}")
sys.exit(1 if bad else 0)
