#!/usr/bin/env python3
"""A recording proxy for the embedded API server: forwards every request to UPSTREAM and
saves each request body to OUT_DIR/NNN.pb (protobuf) or NNN.body, with one JSON line per
request (method, path, content type, accept, status) in OUT_DIR/log.jsonl.

Usage: scripts/record-requests.py PORT UPSTREAM_URL OUT_DIR
Answers are forwarded whole once complete: watches do not stream through it.
"""
import http.server, urllib.request, sys, os, json, itertools
UP = sys.argv[2]; OUT = sys.argv[3]; n = itertools.count()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        i = next(n)
        rec = {"i": i, "method": self.command, "path": self.path, "contentType": self.headers.get("Content-Type"), "accept": self.headers.get("Accept"), "len": len(body)}
        if body:
            ext = "pb" if body.startswith(b"k8s\0") else "body"
            open(os.path.join(OUT, f"{i:03d}.{ext}"), "wb").write(body)
        req = urllib.request.Request(UP + self.path, data=body if body else None, method=self.command)
        for k, v in self.headers.items():
            if k.lower() not in ("host", "content-length", "connection"):
                req.add_header(k, v)
        try:
            resp = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            resp = e
        data = resp.read()
        rec["status"] = resp.status
        with open(os.path.join(OUT, "log.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.send_response(resp.status)
        for k, v in resp.headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
