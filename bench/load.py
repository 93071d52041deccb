#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# A fixed-count load client: N keep-alive GETs spread over C connections, one request in
# flight per connection. Used where a known number of requests matters more than speed
# (instruction counts under callgrind, syscall counts under strace). Exits 1 unless every
# answer is a complete 200.
import selectors
import socket
import sys


def main():
    port, path, total, conns = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    # What wrk sends, so the cost matches bench/proxy.sh's request.
    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (path, port)).encode()
    sel = selectors.DefaultSelector()
    sent = done = bad = 0
    state = {}
    for _ in range(min(conns, total)):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        sent += 1
        state[s] = bytearray()
        sel.register(s, selectors.EVENT_READ)
    while done < total:
        for key, _ in sel.select(timeout=30):
            s = key.fileobj
            data = s.recv(65536)
            if not data:
                print("load: connection closed early", file=sys.stderr)
                return 1
            buf = state[s]
            buf += data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = bytes(buf[:end]).decode("latin-1")
                length = 0
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if len(buf) < end + 4 + length:
                    break
                if not head.startswith("HTTP/1.1 200"):
                    bad += 1
                del buf[:end + 4 + length]
                done += 1
                if sent < total:
                    s.sendall(req)
                    sent += 1
    for s in state:
        s.close()
    if bad:
        print("load: %d answers were not 200" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
