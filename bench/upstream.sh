# SPDX-License-Identifier: MIT
# Sourced by the proxy benchmarks: the upstream they all share, an nginx that answers the
# benchmark path with a fixed ~300-byte JSON body, plus what beaconmux's start-up discovery
# asks (genesis, spec, fork schedule, deposit contract, version).
# bench_upstream_conf PORT DIR: writes DIR/nginx.conf for an upstream on 127.0.0.1:PORT.
# bench_nginx_proxy_conf DIR PORT UP_PORT [SERVER_LINES]: writes DIR/nginx.conf for nginx as
#   the plain reverse proxy the benchmarks compare with (one worker like beaconmux's one
#   loop, upstream keep-alive) on 127.0.0.1:PORT; SERVER_LINES go into its server block.
# Needs bench/lib.sh (free_port, wait_http) sourced first.

BENCH_PATH=/eth/v1/beacon/states/head/finality_checkpoints
BENCH_BODY='{"execution_optimistic":false,"finalized":false,"data":{"previous_justified":{"epoch":"10","root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"},"current_justified":{"epoch":"11","root":"0x9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c"},"finalized":{"epoch":"10","root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"}}}'

# A block-sized JSON answer (~8 KiB) for the cache benchmark: hex fields that compress about
# as real blocks do.
BENCH_BLOCK=$(python3 -c '
import hashlib, json
tx = "0x" + "".join(hashlib.sha256(bytes([i])).hexdigest()[:16] + "00" * 24 for i in range(100))
print(json.dumps({"version": "fulu", "execution_optimistic": False, "finalized": True, "data": {"message": {"slot": "123", "proposer_index": "7", "parent_root": "0x" + "cd" * 32, "state_root": "0x" + "ef" * 32, "body": {"graffiti": "0x" + "00" * 32, "execution_payload": {"transactions": [tx]}}}, "signature": "0x" + "12" * 96}}, separators=(",", ":")))')

bench_upstream_conf() {
  local port=$1 dir=$2 genesis
  genesis=$(( $(date +%s) - 3600 ))
  printf '%s' "$BENCH_BLOCK" > "$dir/block.json" # too long for a `return` string
  chmod a+r "$dir/block.json"; chmod a+rx "$dir" "$(dirname "$dir")" # nginx's worker reads it
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $dir/nginx.pid; error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  server {
    listen 127.0.0.1:$port;
    default_type application/json;
    location = $BENCH_PATH { return 200 '$BENCH_BODY'; }
    location ~ ^/eth/v2/beacon/blocks/0x { add_header Eth-Consensus-Version fulu; root $dir; rewrite ^ /block.json break; }
    location = /eth/v1/node/version { return 200 '{"data":{"version":"Lighthouse/v7.0.0/x86_64-linux"}}'; }
    location = /eth/v1/beacon/genesis { return 200 '{"data":{"genesis_time":"$genesis","genesis_validators_root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b","genesis_fork_version":"0x10000000"}}'; }
    location = /eth/v1/config/spec { return 200 '{"data":{"SECONDS_PER_SLOT":"12","SLOTS_PER_EPOCH":"32","GENESIS_FORK_VERSION":"0x10000000"}}'; }
    location = /eth/v1/config/fork_schedule { return 200 '{"data":[{"previous_version":"0x10000000","current_version":"0x10000000","epoch":"0"}]}'; }
    location = /eth/v1/config/deposit_contract { return 200 '{"data":{"chain_id":"1","address":"0x00000000219ab540356cbb839cbe05303d7705fa"}}'; }
  }
}
CONF
}

bench_nginx_proxy_conf() {
  local dir=$1 port=$2 up=$3 extra=${4:-}
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1; daemon off; master_process off; pid $dir/nginx.pid; error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  upstream beacon { server 127.0.0.1:$up; keepalive 128; }
  server {
    listen 127.0.0.1:$port;
$extra
    location / { proxy_pass http://beacon; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
}
