#!/usr/bin/env bash
# The offline demo: a coordinator on SQLite, one local worker (desktop-capable under Xvfb when it
# is installed), and the fleet status. Everything runs on loopback; nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BIN=$PWD/.venv/bin
STATE=$(mktemp -d "${TMPDIR:-/tmp}/deskfleet-demo.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$STATE"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. create the store and an admin credential"
"$BIN/deskfleet-coordinator" init --db "sqlite:///$STATE/fleet.db" --admin-token-file "$STATE/admin.token"

mkdir -p "$STATE/scripts"
step "2. start the coordinator (private networks allowed: the demo's web site is local)"
"$BIN/deskfleet-coordinator" serve --db "sqlite:///$STATE/fleet.db" --listen 127.0.0.1:0 \
  --heartbeat-interval 1 --lease-ttl 4 --allow-private-networks --metrics-listen 127.0.0.1:0 \
  --scripted-models-dir "$STATE/scripts" >"$STATE/serve.out" 2>"$STATE/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do grep -q "metrics on" "$STATE/serve.out" 2>/dev/null && break; sleep 0.1; done
cat "$STATE/serve.out"
export DESKFLEET_COORDINATOR=$(grep -o 'listening on [0-9.:]*' "$STATE/serve.out" | cut -d' ' -f3)
export DESKFLEET_TOKEN_FILE=$STATE/admin.token

WORKER_ENV=()
if command -v Xvfb >/dev/null && command -v xauth >/dev/null; then
  step "3. start a virtual display (Xvfb) for the desktop worker"
  for n in $(seq 90 199); do [ -e "/tmp/.X$n-lock" ] || [ -e "/tmp/.X11-unix/X$n" ] || break; done
  touch "$STATE/Xauthority"
  xauth -f "$STATE/Xauthority" add ":$n" . "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp -auth "$STATE/Xauthority" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X$n" ] && break; sleep 0.1; done
  WORKER_ENV=(DISPLAY=":$n" XAUTHORITY="$STATE/Xauthority")
  echo "display :$n (1280x800)"
else
  step "3. no Xvfb here: the worker will offer headless research only"
fi

step "4. create a single-use enrollment token and enroll a worker with it"
TOKEN=$("$BIN/deskfleet" tokens create --ttl 10m --json | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
echo "token: ${TOKEN:0:24}..."
"$BIN/deskfleet-worker" enroll --coordinator "$DESKFLEET_COORDINATOR" --token "$TOKEN" \
  --state-dir "$STATE/worker" --name demo-worker --label site=demo

step "5. run the worker: it measures its capabilities and connects"
env "${WORKER_ENV[@]}" XDG_CONFIG_HOME="$STATE/worker/xdg" XDG_CACHE_HOME="$STATE/worker/xdg" \
  "$BIN/deskfleet-worker" run --state-dir "$STATE/worker" 2>"$STATE/worker.log" &
pids+=($!)
for _ in $(seq 300); do
  "$BIN/deskfleet" status --json 2>/dev/null | grep -q '"online": true' && break; sleep 0.1
done

step "6. fleet status"
"$BIN/deskfleet" status
echo
"$BIN/deskfleet" status --json

step "7. the worker in detail"
WORKER_ID=$("$BIN/deskfleet" workers list --json | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["id"])')
"$BIN/deskfleet" workers show "$WORKER_ID"

step "8. submit a durable run: a plan of actions, each with a receipt"
cat >"$STATE/plan.json" <<PLAN
{"title": "demo plan",
 "actions": [
  {"kind": "diag.echo",   "args": {"value": "hello from the fleet"}, "idempotent": true},
  {"kind": "diag.append", "args": {"name": "effects.txt", "line": "written exactly once"}},
  {"kind": "diag.sleep",  "args": {"seconds": 0.2}, "idempotent": true}
 ]}
PLAN
"$BIN/deskfleet" runs submit "$STATE/plan.json" --wait --json >"$STATE/run.json"
RUN_ID=$("$BIN/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$STATE/run.json")
"$BIN/deskfleet" runs show "$RUN_ID"
echo
echo "the journal (every transition, dispatch and receipt, hash-chained):"
"$BIN/deskfleet" runs watch "$RUN_ID" --no-follow
echo
"$BIN/deskfleet" journal verify "$RUN_ID"
echo "effects file (in the worker's scratch directory): $(cat "$STATE/worker/scratch/effects.txt")"

step "9. research: search the local site, fetch sources on the worker, report the evidence"
"$BIN/python" -m scripts.local_site >"$STATE/site.out" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do grep -q "^SITE" "$STATE/site.out" 2>/dev/null && break; sleep 0.1; done
SITE=$(sed -n 's/^SITE //p' "$STATE/site.out")
echo "local site: $SITE (the lighthouses of the Isle of Varn)"
"$BIN/deskfleet" research "when was the north light first lit" \
  --search-url "$SITE/search?q={query}" --max-sources 3 --wait
# Nothing here is evidence (a binary, a challenge, a page without the words): research says
# why and exits 8 (no_evidence), which is this step's point.
set +o pipefail
"$BIN/deskfleet" research "lighthouse files" --url "$SITE/varn/lens.html" \
  --url "$SITE/files/report.pdf" --url "$SITE/challenge" --wait | sed -n '/^evidence/,$p'
set -o pipefail

step "10. a goal: a scripted model (no model service is reached) uses the fleet's tools"
cat >"$STATE/scripts/goal-script.json" <<SCRIPT
{"steps": [
  {"text": "I will read the site's page on the north light.",
   "tool_calls": [{"name": "research", "arguments": {"query": "when was the north light first lit",
                                                      "urls": ["$SITE/varn/north-light.html"]}}]},
  {"text": "Checking my notes.", "tool_calls": [{"name": "recall", "arguments": {"text": "first lit"}}]},
  {"text": "The north light was first lit as the research report says; its receipt is in the journal."}
]}
SCRIPT
"$BIN/deskfleet" goal "when was the north light first lit?" --model "scripted:goal-script.json" --wait --json >"$STATE/goal.json"
GOAL_ID=$("$BIN/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$STATE/goal.json")
"$BIN/deskfleet" runs show "$GOAL_ID"
"$BIN/deskfleet" runs watch "$GOAL_ID" --no-follow | grep -E "goal\.|run\.state" || true

if [ ${#WORKER_ENV[@]} -gt 0 ]; then
  step "11. desktop control: request, approve (narrowed), act, take over, kill switch, evidence"
  DESK=$("$BIN/deskfleet" desktop request --worker "$WORKER_ID" --action screenshot \
    --action mouse_move --action left_click --ttl 5m --max-actions 10 \
    --reason "demo: look at the screen" --json)
  DESK_RUN=$(echo "$DESK" | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  "$BIN/deskfleet" approvals list
  "$BIN/deskfleet" desktop act "$DESK_RUN" screenshot || echo "(refused: nobody has approved yet)"
  APPROVAL=$("$BIN/deskfleet" approvals list --json | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["approvals"][0]["id"])')
  "$BIN/deskfleet" approvals approve "$APPROVAL" --action screenshot --action mouse_move --max-actions 5
  "$BIN/deskfleet" desktop act "$DESK_RUN" screenshot --space 640x400 --out "$STATE/screen.png"
  "$BIN/deskfleet" desktop act "$DESK_RUN" left_click --x 10 --y 10 || echo "(refused: not in the approved scope)"
  # A person takes the controls (the run waits as human_active), then gives them back.
  TAKEOVER=$("$BIN/deskfleet" desktop takeover "$DESK_RUN" --no-url --reason "demo: a person looks" --json \
    | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  "$BIN/deskfleet" desktop act "$DESK_RUN" screenshot || echo "(refused: a person holds the desktop)"
  "$BIN/deskfleet" desktop handback "$TAKEOVER" --note "demo: nothing changed"
  "$BIN/deskfleet" kill engage --worker "$WORKER_ID" --reason "demo"
  sleep 0.5
  "$BIN/deskfleet" kill status
  "$BIN/deskfleet" desktop act "$DESK_RUN" mouse_move --x 20 --y 20 || echo "(refused: the kill switch is engaged)"
  "$BIN/deskfleet" kill release --worker "$WORKER_ID" --reason "demo over"
  "$BIN/deskfleet" runs show "$DESK_RUN"
  # The run's evidence in one signed file, checked offline against the pinned key.
  KEY=$("$BIN/deskfleet-coordinator" evidence-key --db "sqlite:///$STATE/fleet.db" --json \
    | "$BIN/python" -c 'import json,sys; print(json.load(sys.stdin)["fingerprint"])')
  "$BIN/deskfleet" runs export "$DESK_RUN" --out "$STATE/evidence.tar"
  "$BIN/deskfleet" verify "$STATE/evidence.tar" --key "$KEY"
fi

step "12. where things stand: the fleet (deskfleet top) and a few of the coordinator's metrics"
"$BIN/deskfleet" top --once
METRICS=$(grep -o 'metrics on [0-9.:]*' "$STATE/serve.out" | cut -d' ' -f3)
"$BIN/python" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://$METRICS/metrics" \
  | grep -E '^deskfleet_(actions_total|run_state_seconds_total|retries_total|workers_online|approvals_waiting)' \
  | head -n 20

step "13. a used token is refused"
"$BIN/deskfleet-worker" enroll --coordinator "$DESKFLEET_COORDINATOR" --token "$TOKEN" \
  --state-dir "$STATE/worker2" || echo "(refused, as it should be)"

step "14. revoke the worker: it is cut off at once"
"$BIN/deskfleet" workers revoke "$WORKER_ID"
sleep 1
tail -n 1 "$STATE/worker.log"
"$BIN/deskfleet" status

step "15. the audit log: every administrative act, who, when, from where"
"$BIN/deskfleet" audit
echo
echo "demo finished; state removed"
