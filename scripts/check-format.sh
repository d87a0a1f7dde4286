#!/usr/bin/env bash
# Checks that every C++ file tracked by git is formatted with the project's .clang-format.
# Usage: scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc')
[ ${#files[@]} -eq 0 ] && exit 0
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "format: $f differs from .clang-format (run scripts/check-format.sh --fix)" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "format: ${#files[@]} files OK"
exit $bad
