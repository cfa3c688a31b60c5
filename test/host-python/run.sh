#!/bin/sh
# Runs a command with the poisoned python3 of this folder first on PATH.
PATH="$(dirname "$0"):$PATH" exec "$@"
