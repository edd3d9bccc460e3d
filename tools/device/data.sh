#!/bin/bash
# data.sh DIR N: N keywords, 16 dense queries (K = 1000) and the index, in DIR (the standard workload)
mkdir -p "$1" && flashtrie gen-keywords -n "$2" -o "$1/kw.npz" --quiet \
  && flashtrie gen-queries "$1/kw.npz" -n 16 -K 1000 --preset dense -o "$1/q.npz" --quiet \
  && flashtrie build "$1/kw.npz" -o "$1/kw.ftrie" --quiet
