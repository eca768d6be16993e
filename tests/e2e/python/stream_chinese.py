"""Streams a chat answer with Python's `requests`, the way FastDeploy users' scripts do.

requests decodes a text/* body by the charset in Content-Type and falls back to
ISO-8859-1 when there is none (RFC 2616), so a stream served without
"charset=utf-8" comes back as mojibake. Usage: stream_chinese.py BASE_URL EXPECTED
Exits non-zero, saying what differed, unless the streamed content equals EXPECTED.
"""
import json
import sys

import requests


def main() -> int:
    base_url, expected = sys.argv[1], sys.argv[2]
    body = {"model": "default", "stream": True, "max_tokens": 200,
            "messages": [{"role": "user", "content": "请用中文回答"}]}
    with requests.post(f"{base_url}/v1/chat/completions", json=body, stream=True, timeout=60) as response:
        response.raise_for_status()
        if (response.encoding or "").lower() != "utf-8":
            print(f"requests decodes the stream as {response.encoding!r}; "
                  f"Content-Type is {response.headers.get('content-type')!r}", file=sys.stderr)
            return 1
        content = ""
        for line in response.iter_lines(decode_unicode=True):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            for choice in chunk["choices"]:
                content += choice["delta"].get("content") or ""
    if content != expected:
        print(f"streamed content {content!r} differs from {expected!r}", file=sys.stderr)
        return 1
    print(f"streamed {len(content)} characters intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
