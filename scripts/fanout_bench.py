#!/usr/bin/env python3
"""Driver of scripts/fanout_bench.sh: one workload against a running prefill daemon serving
both bundled specialists, its figures as JSON.

  fanout     one fan-out request (scd.fanout: both specialists) per context; the prefill
             daemon's own counters give the producer's work: base-model prefills and encodes
             (count, seconds) and payload bytes sent.
  alternate  separate streamed requests over each context, alternating the specialists
             (bAbI, WikiText, bAbI, WikiText: one question each); the prefix cache's hits and
             misses, and each request's time to first token as the client sees it.
"""
import argparse
import http.client
import json
import re
import statistics
import sys
import time

MODELS = ["stories260K-babi-qa", "stories260K-wiki"]


def babi_stories(path):
    """The stories of a bAbI file: (statements, questions), line numbers dropped."""
    stories = []
    for line in open(path):
        number, _, text = line.strip().partition(" ")
        if not text:
            continue
        if number == "1":
            stories.append(([], []))
        answer = re.search(r"[\t|]", text)  # a question: its answer after a tab (or "|")
        if answer:
            stories[-1][1].append(text[:answer.start()].strip())
        else:
            stories[-1][0].append(text)
    return stories


def contexts(path, count, stories_per_context):
    """`count` contexts of `stories_per_context` distinct stories each, with their questions."""
    stories = babi_stories(path)
    if count * stories_per_context > len(stories):
        sys.exit(f"{path} holds {len(stories)} stories, fewer than {count} x {stories_per_context}")
    out = []
    for i in range(count):
        group = stories[i * stories_per_context:(i + 1) * stories_per_context]
        out.append((" ".join(t for g in group for t in g[0]), [q for g in group for q in g[1]]))
    return out


def metrics(host, port):
    """Every sample of the daemon's /metrics, summed over labels by metric name."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    sums = {}
    for line in body.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
    return sums


def post(host, port, body, stream=False):
    """POST /v1/completions; (status, body, seconds to the first streamed event)."""
    c = http.client.HTTPConnection(host, port, timeout=120)
    start = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not stream or r.status != 200:
        return r.status, r.read().decode(), time.perf_counter() - start
    first = None
    data = b""
    while True:
        line = r.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if first is None and line.startswith(b"data: ") and b'"text"' in line:
            first = time.perf_counter() - start
        data += line
    return r.status, data.decode(), first


def delta(after, before, name):
    return after.get(name, 0.0) - before.get(name, 0.0)


def run_fanout(args, host, port):
    before = metrics(host, port)
    for text, questions in contexts(args.prompts, args.contexts, args.stories):
        body = {"model": MODELS[0], "prompt": f"{text} {questions[0]}", "max_tokens": args.max_tokens,
                "temperature": 0, "scd": {"fanout": MODELS}}
        status, out, _ = post(host, port, body)
        if status != 200:
            sys.exit(f"fan-out request failed: {status} {out}")
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    after = metrics(host, port)
    n = args.contexts
    return {
        "contexts": n,
        "prefills_per_context": delta(after, before, "scd_producer_prefill_seconds_count") / n,
        "prefill_ms_per_context": 1e3 * delta(after, before, "scd_producer_prefill_seconds_sum") / n,
        "encodes_per_context": delta(after, before, "scd_encode_seconds_count") / n,
        "encode_ms_per_context": 1e3 * delta(after, before, "scd_encode_seconds_sum") / n,
        "payload_bytes_per_context": delta(after, before, "scd_payload_bytes_sum") / n,
        "payloads_per_context": delta(after, before, "scd_payload_bytes_count") / n,
    }


def run_alternate(args, host, port):
    before = metrics(host, port)
    ttft = []
    # Contexts after the fan-out phase's, so that each starts cold.
    for text, questions in contexts(args.prompts, args.contexts * 2, args.stories)[args.contexts:]:
        for k in range(4):
            body = {"model": MODELS[k % 2], "prompt": f"{text} {questions[k % len(questions)]}",
                    "max_tokens": args.max_tokens, "temperature": 0, "stream": True}
            status, out, first = post(host, port, body, stream=True)
            if status != 200 or first is None:
                sys.exit(f"request failed: {status} {out}")
            ttft.append(first * 1e3)
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    after = metrics(host, port)
    hits = delta(after, before, "scd_prefix_cache_hits_total")
    misses = delta(after, before, "scd_prefix_cache_misses_total")
    ttft.sort()
    return {
        "requests": len(ttft),
        "cache_hits": hits,
        "cache_misses": misses,
        "hit_rate": hits / max(1.0, hits + misses),
        "ttft_ms_p50": statistics.median(ttft),
        "ttft_ms_p90": ttft[int(0.9 * (len(ttft) - 1))],
        "encodes": delta(after, before, "scd_encode_seconds_count"),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--workload", choices=["fanout", "alternate"], required=True)
    p.add_argument("--prompts", required=True, help="a bAbI task file (numbered lines)")
    p.add_argument("--contexts", type=int, default=25)
    p.add_argument("--stories", type=int, default=2, help="stories per context")
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    run = run_fanout if args.workload == "fanout" else run_alternate
    result = run(args, "127.0.0.1", args.port)
    json.dump(result, open(args.out, "w"), indent=1)
    print(json.dumps(result), file=sys.stderr)


if __name__ == "__main__":
    main()
