#!/bin/sh
# poold-agent links the agent's link to poold and nothing of the pool's store or rules
# (docs/design.md, "The pool's layers"): no SQLite, no PoolState, no scheduler's timeline.
# Usage: agent_links_alone.sh POOLD_AGENT_BINARY
set -u
binary=${1:?usage: agent_links_alone.sh POOLD_AGENT_BINARY}
symbols=$(nm -C "$binary") || { echo "cannot read the symbols of $binary (nm failed)"; exit 1; }
# The check reads symbols at all: the agent's link is there.
if ! printf '%s\n' "$symbols" | grep -q 'poolrun::pool::openAgentLink('; then
  echo "no poolrun::pool::openAgentLink symbol in $binary: is it stripped, or not poold-agent?"
  exit 1
fi
found=$(printf '%s\n' "$symbols" | grep -E 'sqlite3_|poolrun::pool::PoolState::|poolrun::pool::Timeline' | head -5)
if [ -n "$found" ]; then
  echo "$binary links the pool's store or rules (it should link poolrun_pool_client alone); for example:"
  printf '%s\n' "$found"
  exit 1
fi
echo "$binary links the agent's link alone"
