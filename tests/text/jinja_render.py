#!/usr/bin/env python3
"""Renders a chat template with jinja2 the way Hugging Face transformers does.

The reference side of tests/text/jinja_differential_test.cpp: the environment is
transformers' chat-template environment (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; a tojson that keeps key order and does not
HTML-escape; raise_exception and strftime_now globals; the {% generation %} block).

    jinja_render.py TEMPLATE_FILE CONTEXT_JSON_FILE
        Prints the rendered text (UTF-8, exactly, no newline added). On a template
        error prints "error: Type: message" to stderr and exits with status 1.
    jinja_render.py --json TEMPLATE_FILE CONTEXT_JSON_FILE...
        One render per context file; prints a JSON array of {"ok": true, "output": ...}
        or {"ok": false, "error": ...}.
    jinja_render.py --snippets SNIPPETS_JSON_FILE CONTEXT_JSON_FILE
        SNIPPETS_JSON_FILE holds a JSON array of template strings; renders each with the
        context and prints a JSON array of results as above.
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """transformers' AssistantTracker tag, without the span tracking: renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.datetime.now().strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def render_result(env, source, context):
    try:
        return {"ok": True, "output": env.from_string(source).render(**context)}
    except Exception as e:  # any failure counts as "errors in jinja2"
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main(argv):
    env = make_environment()
    if len(argv) >= 3 and argv[0] == "--json":
        source = read_text(argv[1])
        results = [render_result(env, source, read_json(path)) for path in argv[2:]]
        sys.stdout.write(json.dumps(results))
        return 0
    if len(argv) == 3 and argv[0] == "--snippets":
        context = read_json(argv[2])
        results = [render_result(env, source, context) for source in read_json(argv[1])]
        sys.stdout.write(json.dumps(results))
        return 0
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    result = render_result(env, read_text(argv[0]), read_json(argv[1]))
    if not result["ok"]:
        sys.stderr.write("error: " + result["error"] + "\n")
        return 1
    sys.stdout.buffer.write(result["output"].encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
