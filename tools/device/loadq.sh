#!/bin/bash
# loadq.sh N: an N library in /tmp/loadq and its index in both id orders (index.ftrie, input.ftrie), GPU-built
# where cupy and a GPU are present
w=/tmp/loadq gpu=""
mkdir -p "$w" && flashtrie bench scale-step gen --n "$1" --dir "$w" --out "$D/scale.jsonl" || exit 1
python3 -c "from flashtrie.arrays import cupy_module; cupy_module()" 2>/dev/null && gpu="--gpu"
for ids in index input; do flashtrie build $gpu --ids $ids "$w/kw.npz" -o "$w/$ids.ftrie" || exit 1; done
