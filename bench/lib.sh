# SPDX-License-Identifier: MIT
# Sourced by the shell benchmarks: the scaffolding every one of them needs, written once.
#  - bench_start NAME: a work folder WORK (/tmp/bm-NAME.XXXXXX) and the list PIDS of the
#    processes the script starts; on exit every one of them is stopped and WORK removed.
#  - free_port: a free loopback port (ephemeral, never a fixed one).
#  - wait_port PORT: until something accepts on 127.0.0.1:PORT (10 s at most), or fail
#    showing the logs under WORK.
#  - wait_http PORT PATH [TRIES]: until PATH answers 200 (0.1 s apart), or fail.

bench_start() {
  WORK=$(mktemp -d "/tmp/bm-$1.XXXXXX")
  PIDS=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 1 200); do
    if python3 -c "import socket;socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "bench: nothing listening on port $1" >&2
  cat "$WORK"/*.log "$WORK"/*/stderr "$WORK"/*/error.log 2>/dev/null >&2
  return 1
}

wait_http() {
  local port=$1 path=$2 tries=${3:-200}
  for _ in $(seq 1 "$tries"); do
    if curl -fs -o /dev/null "http://127.0.0.1:$port$path"; then return 0; fi
    sleep 0.1
  done
  echo "bench: http://127.0.0.1:$port$path never answered 200" >&2
  return 1
}
