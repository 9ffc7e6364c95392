#!/usr/bin/env bash
# Checks the monitoring files against promtool and a real Prometheus scraping a
# real oi (Debian's prometheus package; .ci/run installs it):
#   1. promtool check rules / test rules on oi-alerts.yml;
#   2. oi runs with --metrics on loopback and forwards a few connections,
#      Prometheus scrapes it every second, and every expression of the Grafana
#      dashboard and of the alert rules is evaluated through Prometheus's HTTP
#      API: each must parse, and each must return data (a panel showing
#      "No data" on a working oi is a broken panel).
# Usage: dist/monitoring/check.sh [path/to/oi]   (default target/debug/oi)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
oi=${1:-$here/../../target/debug/oi}
command -v promtool >/dev/null || { echo "promtool missing: apt-get install prometheus" >&2; exit 1; }
command -v prometheus >/dev/null || { echo "prometheus missing: apt-get install prometheus" >&2; exit 1; }
command -v openssl >/dev/null || { echo "openssl missing: apt-get install openssl" >&2; exit 1; }

promtool check rules "$here/oi-alerts.yml"
(cd "$here" && promtool test rules oi-alerts.test.yml)

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# A free loopback port: bind port 0 with python and read it back. The gap
# before oi binds it is harmless here (nothing else in this script binds).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fwd_port=$(port); metrics_port=$(port); prom_port=$(port)
# The echo backend binds port 0 and prints the port once it listens.
exec 3< <(exec python3 -c '
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
def serve(c):
    with c:
        while (d := c.recv(65536)):
            c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
')
pids+=($!)
read -r -t 20 echo_port <&3
# A health check (connect only), so oi_backend_probe_seconds has data; and
# a listener two rules share by server name, each a rule of its own (named
# 127.0.0.1:PORT/tcp[sni=NAME]) in every series the alerts and panels read.
sni_port=$(port)
# A rule that ends TLS, so the TLS series (handshakes, failures, the
# certificate's expiry the expiry alert reads) exist.
tls_port=$(port)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj /CN=check.test -keyout "$work/tls.key" -out "$work/tls.pem" 2>/dev/null
chmod 600 "$work/tls.key"
cat > "$work/oi.conf" <<CONF
127.0.0.1 $fwd_port 127.0.0.1 $echo_port [check-interval=1]
127.0.0.1 $sni_port 127.0.0.1 $echo_port [sni=a.example.com,check-interval=1]
127.0.0.1 $sni_port 127.0.0.1 $echo_port
127.0.0.1 $tls_port 127.0.0.1 $echo_port [tls-cert=$work/tls.pem,tls-key=$work/tls.key]
CONF
"$oi" -c "$work/oi.conf" --metrics "127.0.0.1:$metrics_port" 2>"$work/oi.err" &
oi_pid=$!
pids+=($oi_pid)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$metrics_port/metrics" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$metrics_port/metrics" >/dev/null || { cat "$work/oi.err" >&2; echo "oi did not serve /metrics" >&2; exit 1; }

cat > "$work/prometheus.yml" <<PROM
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: oi
    static_configs: [{targets: ["127.0.0.1:$metrics_port"]}]
PROM
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prom.log" 2>&1 &
pids+=($!)

# Traffic throughout the scrapes, so rates have two points with a difference
# (bounded: the script's own deadline below ends it sooner).
python3 - "$fwd_port" <<'PY' &
import socket, sys, time
end = time.time() + 120
while time.time() < end:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as c:
        c.sendall(b"ping"); c.recv(16)
    time.sleep(0.05)
PY
pids+=($!)

python3 - "$here" "$prom_port" "$oi_pid" <<'PY'
import json, os, re, signal, sys, time, urllib.parse, urllib.request
here, port, oi_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
dash = json.load(open(f"{here}/oi-dashboard.json"))
exprs = []
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            exprs.append((p["title"], t["expr"]))
        walk(p.get("panels", []))
walk(dash["panels"])
for a in dash["annotations"]["list"]:
    exprs.append(("annotation " + a["name"], a["expr"]))
for v in dash["templating"]["list"]:
    if v["type"] == "query":
        m = re.fullmatch(r"label_values\((.*), *(\w+)\)", v["definition"])
        exprs.append(("variable " + v["name"], m.group(1)))
rules = open(f"{here}/oi-alerts.yml").read()
for m in re.finditer(r"^\s*expr: (.*)$", rules, re.M):
    # The comparison is what fires the alert; the series under it must exist.
    exprs.append(("alert", re.split(r" (==|>|<) ", m.group(1))[0]))
# The rule routed by server name has its own pool in what the alerts read.
sni = r'rule=~".*:[0-9]+/tcp\\[sni=a\\.example\\.com\\]"'
exprs.append(("SNI rule's backends", "oi_backend_up{%s}" % sni))
exprs.append(("SNI rule's pool", "max by (instance, rule) (oi_backend_up{%s})" % sni))
exprs.append(("SNI rule's probes", "oi_backend_probe_seconds{%s}" % sni))
exprs.append(("SNI rule's limit refusals", "oi_limit_refusals_total{%s}" % sni))
def subst(e):
    return (e.replace("$__rate_interval", "5s").replace('"$instance"', '".*"')
             .replace('"$rule"', '".*"'))
def query(e):
    """Prometheus's answer to `e`. Until its storage is ready Prometheus answers
    503 with a plain-text body, and before it listens the connection is refused:
    both come back as an error answer (with the text), so the bounded waits
    below retry them instead of dying on a body that is not JSON."""
    u = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": e})
    try:
        with urllib.request.urlopen(u, timeout=5) as answer:
            body = answer.read()
    except urllib.error.HTTPError as err:
        body = err.read()
    except (urllib.error.URLError, OSError) as err:
        return {"status": "error", "error": f"no answer: {err}"}
    try:
        return json.loads(body)
    except ValueError:
        return {"status": "error", "error": body[:200].decode("utf-8", "replace")}
def wait_for(e, seconds, what):
    """Polls `e` until it returns data (bounded), or exits saying `what` never happened."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        r = query(e)
        if r.get("status") == "success" and r["data"]["result"]:
            return
        time.sleep(0.5)
    sys.exit(f"Prometheus never saw {what}")
# Prometheus needs a few scrapes before rates have two points.
wait_for('count(rate(oi_connections_total[5s]) > 0)', 60, "oi's connections rise")
# A reload after the first scrapes, so the reload annotation has something to show.
os.kill(oi_pid, signal.SIGHUP)
wait_for('changes(oi_reloads_total{result="ok"}[1m]) > 0', 30, "oi's reload")
bad = 0
for title, e in exprs:
    r = query(subst(e))
    if r.get("status") != "success":
        print(f"FAIL {title}: {e}: {r.get('error')}"); bad += 1
    elif not r["data"]["result"]:
        print(f"FAIL {title}: {e}: no data"); bad += 1
print(f"{len(exprs)} expressions evaluated, {bad} failed")
sys.exit(1 if bad else 0)
PY
