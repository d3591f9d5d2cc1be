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
  browser)
    # The Streams UI tests drive a real headless Chromium through its WebDriver (Selenium).
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing chromium and chromium-driver (Debian packages) for the UI tests" >&2
        { apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
          { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } ||
          { echo "error: apt-get could not install chromium chromium-driver; install them (the UI tests need a headless Chromium and its chromedriver)" >&2; exit 1; }
      else
        echo "error: chromium and chromedriver not found; install them (e.g. apt-get install chromium chromium-driver) for the UI tests" >&2; exit 1
      fi
    fi ;;
  *) echo "usage: dev/require.sh python|java|mvn|browser" >&2; exit 2 ;;
esac
