"""Writes a learnable token file (nanoGPT train.bin layout: flat uint16).

usage: make_tokens.py OUT COUNT [VOCAB] [SEED]

The stream is a random sequence of 40 short random phrases, so a model can
learn it well below the ln(VOCAB) loss of uniform guessing.
"""
import random
import struct
import sys

out, count = sys.argv[1], int(sys.argv[2])
vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 256
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
phrases = [[rng.randrange(vocab) for _ in range(rng.randrange(3, 9))]
           for _ in range(40)]
tokens = []
while len(tokens) < count:
    tokens += rng.choice(phrases)
with open(out, "wb") as f:
    f.write(struct.pack("<%dH" % count, *tokens[:count]))
