"""Runs a command and prints its output, then "exit code N", so that a test
can check the exact exit status (2: bad input, 1: failure) with FileCheck.

usage: exit_code.py CMD [ARG...]
"""
import subprocess
import sys

proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
sys.stdout.write(proc.stdout)
print("exit code %d" % proc.returncode)
