"""Closed-loop load generator, run inside a lab node by the benchmarks (piped to its python3).

  python3 - SCHEME HOST PORT PATH REQUESTS CONCURRENCY BODY CERTS EXPECT_TOKENS

`concurrency` threads, each with one keep-alive connection (TLS 1.3 with CERTS/bench-client.* for https),
POST BODY to PATH until REQUESTS are done. A request counts when it answers 200 without an error and, with
EXPECT_TOKENS > 0, exactly that many completion tokens. Prints {"wall_s", "latencies_ms", "errors"} as JSON.
"""

import http.client
import json
import ssl
import sys
import threading
import time

scheme, host, port, path, requests, concurrency, body, certs, expect = sys.argv[1:10]
port, requests, concurrency, expect = int(port), int(requests), int(concurrency), int(expect)
context = None
if scheme == "https":
    context = ssl.create_default_context(cafile=certs + "/ca.crt")
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(certs + "/bench-client.crt", certs + "/bench-client.key")


def connect():
    if context:
        return http.client.HTTPSConnection(host, port, context=context, timeout=120)
    return http.client.HTTPConnection(host, port, timeout=120)


lock, left, latencies, errors = threading.Lock(), [requests], [], [0]


def answered(response, data):
    if response.status != 200 or b'"error"' in data:
        return False
    return not expect or json.loads(data)["usage"]["completion_tokens"] == expect


def worker():
    conn = connect()
    while True:
        with lock:
            if left[0] == 0:
                return
            left[0] -= 1
        t0 = time.perf_counter()
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            ok = answered(response, response.read())
        except Exception:
            ok = False
            conn.close()
            conn = connect()
        with lock:
            if ok:
                latencies.append((time.perf_counter() - t0) * 1000.0)
            else:
                errors[0] += 1


start = time.perf_counter()
threads = [threading.Thread(target=worker) for _thread in range(concurrency)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"wall_s": time.perf_counter() - start, "latencies_ms": latencies, "errors": errors[0]}))
