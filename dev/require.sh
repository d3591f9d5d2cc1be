#!/usr/bin/env bash
# One-line, actionable errors for the tools `make setup` cannot install by itself.
set -u
case "$1" in
  python)
    py="${2:-python3.11}"
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
      echo "error: cannot run $py; install Python 3.11 (or run make PYTHON=/path/to/python3.11)" >&2; exit 1; }
    case "$ver" in
      3.1[1-9]|3.[2-9][0-9]) ;;
      *) echo "error: $py is Python $ver; Python 3.11+ is required (make PYTHON=/path/to/python3.11)" >&2; exit 1 ;;
    esac ;;
  java)
    command -v java >/dev/null 2>&1 || { echo "error: java not found; install Java 17 or 21 (e.g. apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
    major=$(java -version 2>&1 | head -1 | sed -E 's/.*version "([0-9]+).*/\1/')
    [ "${major:-0}" -ge 17 ] 2>/dev/null || { echo "error: Java 17+ is required, found: $(java -version 2>&1 | head -1)" >&2; exit 1; } ;;
  mvn)
    command -v mvn >/dev/null 2>&1 || { echo "error: mvn not found; install Maven 3.8+ (e.g. apt-get install maven)" >&2; exit 1; } ;;
  *) echo "usage: dev/require.sh python|java|mvn" >&2; exit 2 ;;
esac
