"""Checks structured outputs independently of the server: JSON Schema with python3-jsonschema
(Draft 2020-12, formats checked), regexes with Python's re, choices by membership, JSON
objects with json, and structural tags by finding each tagged call and validating its JSON.

Reads a JSON list of {"kind", "constraint", "text"} from the file named by argv[1]; prints
one line per invalid output and exits 1 if there is any.
"""
import json
import re
import sys

import jsonschema


def check_schema(schema, text):
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    validator.validate(json.loads(text))


def check_structural_tag(tag, text, cut):
    # Every place a trigger occurs must start one whole structure (the last may be
    # unfinished when the length limit cut the output).
    position = 0
    while True:
        starts = [(text.find(t, position), t) for t in tag["triggers"] if text.find(t, position) >= 0]
        if not starts:
            return
        start, _ = min(starts)
        for structure in tag["structures"]:
            if not text.startswith(structure["begin"], start):
                continue
            body_start = start + len(structure["begin"])
            end = text.find(structure["end"], body_start)
            if end < 0 and cut:
                return
            assert end >= 0, f"unterminated structure at {start}"
            check_schema(structure.get("schema", True), text[body_start:end])
            position = end + len(structure["end"])
            break
        else:
            if cut and any(s["begin"].startswith(text[start:]) for s in tag["structures"]):
                return
            raise AssertionError(f"a trigger at {start} starts no structure")


def check(item):
    kind, constraint, text = item["kind"], item["constraint"], item["text"]
    if kind == "json_schema":
        check_schema(constraint, text)
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict), "not an object"
    elif kind == "regex":
        assert re.fullmatch(constraint, text, re.DOTALL), f"does not match {constraint!r}"
    elif kind == "choice":
        assert text in constraint, f"not one of {constraint}"
    elif kind == "python_regex":  # a grammar whose language is regular, as Python re
        assert re.fullmatch(constraint, text), f"does not match {constraint!r}"
    elif kind == "structural_tag":
        check_structural_tag(constraint, text, item.get("cut", False))
    else:
        raise AssertionError(f"unknown kind {kind}")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        items = json.load(f)
    bad = 0
    for item in items:
        try:
            check(item)
        except Exception as error:  # every failure is reported, whatever raised it
            bad += 1
            print(f"INVALID [{item.get('label', '')}] {item['text']!r}: {error}")
    print(f"checked {len(items)} outputs, {bad} invalid")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
