"""A scripted language-server exchange: initialize, open a document, print
the diagnostics the server publishes for it (line: message), shut down.

    lsp-exchange.py SERVER FILE.mlir
"""
import json
import os
import select
import subprocess
import sys
import time


def send(proc, message):
    body = json.dumps(message).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()


class Reader:
    """LSP messages from the server's stdout (raw reads: select() sees only
    what no buffer has taken yet)."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        self.data = b""

    def fill(self, deadline):
        if not select.select([self.fd], [], [], max(0, deadline - time.time()))[0]:
            return False
        chunk = os.read(self.fd, 65536)
        self.data += chunk
        return bool(chunk)

    def receive(self, deadline):
        """The next message, or None after the deadline or at the end."""
        while b"\r\n\r\n" not in self.data:
            if not self.fill(deadline):
                return None
        header, _, rest = self.data.partition(b"\r\n\r\n")
        length = int([l for l in header.split(b"\r\n")
                      if l.lower().startswith(b"content-length")][0].split(b":")[1])
        while len(rest) < length:
            self.data = header + b"\r\n\r\n" + rest
            if not self.fill(deadline):
                return None
            header, _, rest = self.data.partition(b"\r\n\r\n")
        self.data = rest[length:]
        return json.loads(rest[:length])


def main():
    server, path = sys.argv[1], sys.argv[2]
    uri = "file://" + path
    proc = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    reader = Reader(proc.stdout)
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    reply = reader.receive(deadline)
    assert reply and reply.get("id") == 1 and "capabilities" in reply["result"], reply
    print("initialized:", "textDocumentSync" in reply["result"]["capabilities"])
    send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
    send(proc, {"jsonrpc": "2.0", "method": "textDocument/didOpen",
                "params": {"textDocument": {"uri": uri, "languageId": "mlir", "version": 1,
                                            "text": open(path).read()}}})
    while True:
        message = reader.receive(deadline)
        if message is None:
            print("no diagnostics before the deadline")
            break
        if message.get("method") == "textDocument/publishDiagnostics":
            for d in message["params"]["diagnostics"]:
                print("%d: %s" % (d["range"]["start"]["line"] + 1, d["message"]))
            break
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    reader.receive(deadline)
    send(proc, {"jsonrpc": "2.0", "method": "exit"})
    proc.wait(timeout=10)
    print("exit", proc.returncode)


main()
